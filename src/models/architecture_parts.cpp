#include "models/architecture_parts.h"

namespace autooptim::models {

nlohmann::json tiny_transformer() {
  return {{"num_attention_heads", 4}, {"attention_head_dim", 24}, {"in_channels", 16},
          {"out_channels", 16},       {"text_dim", 64},           {"freq_dim", 64},
          {"ffn_dim", 256},           {"num_layers", 4},          {"patch_size", {1, 2, 2}}};
}

nlohmann::json tiny_text_encoder() {
  return {{"vocab_size", 512},
          {"d_model", 64},
          {"d_kv", 16},
          {"d_ff", 128},
          {"num_layers", 2},
          {"num_heads", 4},
          {"relative_attention_num_buckets", 32},
          {"relative_attention_max_distance", 128},
          {"feed_forward_proj", "gated-gelu"}};
}

std::vector<double> tiny_latents_mean() {
  std::vector<double> mean;
  for (int i = 0; i < 16; ++i) mean.push_back(0.05 * (i % 5) - 0.1);
  return mean;
}

std::vector<double> tiny_latents_std() {
  std::vector<double> stdv;
  for (int i = 0; i < 16; ++i) stdv.push_back(0.5 + 0.05 * (i % 7));
  return stdv;
}

nlohmann::json wan21_vae(int64_t base_dim, int64_t num_res_blocks, const std::vector<double>& latents_mean,
                         const std::vector<double>& latents_std) {
  return {{"base_dim", base_dim},
          {"z_dim", 16},
          {"dim_mult", {1, 2, 4, 4}},
          {"num_res_blocks", num_res_blocks},
          {"attn_scales", nlohmann::json::array()},
          {"temperal_downsample", {false, true, true}},
          {"is_residual", false},
          {"in_channels", 3},
          {"out_channels", 3},
          {"patch_size", nullptr},
          {"scale_factor_spatial", 8},
          {"scale_factor_temporal", 4},
          {"latents_mean", latents_mean},
          {"latents_std", latents_std}};
}

}  // namespace autooptim::models
