#include "models/architecture_parts.h"
#include "models/wan22_models.h"

namespace autooptim::models {
namespace {

// The A14B experts (Wan2.2-T2V-A14B-Diffusers and -I2V-A14B-Diffusers, transformer/ and transformer_2/
// config.json): the Wan2.1 14B transformer, 40 layers of 40 heads x 128, the UMT5-XXL's 4096-wide text.
// I2V takes 16 noise + 4 mask + 16 image-condition channels.
nlohmann::json a14b_transformer(int64_t in_channels) {
  return {{"num_attention_heads", 40},
          {"attention_head_dim", 128},
          {"in_channels", in_channels},
          {"out_channels", 16},
          {"text_dim", 4096},
          {"freq_dim", 256},
          {"ffn_dim", 13824},
          {"num_layers", 40},
          {"patch_size", {1, 2, 2}},
          {"cross_attn_norm", true},
          {"qk_norm", "rms_norm_across_heads"},
          {"eps", 1e-6},
          {"rope_max_seq_len", 1024}};
}

// The Wan2.1 VAE (vae/config.json of both checkpoints; diffusers AutoencoderKLWan's defaults): 96 base
// channels, 2 residual blocks per stage, the checkpoints' latent statistics.
nlohmann::json a14b_vae() {
  return wan21_vae(96, 2,
                   {-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
                    -0.3632, -0.1922, -0.9497, 0.2503, -0.2921},
                   {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
                    1.6382, 1.1253, 2.8251, 1.9160});
}

// UMT5-XXL, as TI2V-5B's (text_encoder/config.json).
nlohmann::json umt5_xxl() {
  return {{"vocab_size", 256384},
          {"d_model", 4096},
          {"d_kv", 64},
          {"d_ff", 10240},
          {"num_layers", 24},
          {"num_heads", 64},
          {"relative_attention_num_buckets", 32},
          {"relative_attention_max_distance", 128},
          {"feed_forward_proj", "gated-gelu"}};
}

ModelFacts a14b(const std::string& name, bool image_to_video) {
  ModelFacts m;
  m.name = name;
  m.embedded = false;
  m.architecture = Architecture{a14b_transformer(image_to_video ? 36 : 16), a14b_vae(), umt5_xxl()};
  m.tokenizer = TokenizerSource::kCheckpoint;
  m.trainable = false;
  m.wants_gpu = true;
  // model_index.json: boundary_ratio 0.875 (T2V) and 0.9 (I2V), expand_timesteps false.
  m.pipeline = {false, image_to_video ? 0.9 : 0.875, image_to_video};
  m.pixel_multiple = 16;
  // 1280x720, 81 frames at 16 fps (the checkpoints' model cards and the official shape: 21 x 45 x 80
  // latents, 75,600 tokens); steps, guidance and guidance_2: the reference pipeline's defaults (diffusers
  // WanPipeline / WanImageToVideoPipeline __call__: 50 steps, guidance 5.0, guidance_2 unset = guidance).
  // flow_shift: the checkpoints' scheduler_config.json is what a real load uses; 5.0 here for synthetic
  // weights, as TI2V-5B's.
  m.official = {720, 1280, 81, 16, 50, 5.0, 42, 5.0, 5.0};
  // As TI2V-5B's (a larger model reaches at least the 5B's share of the peak).
  m.gate = {0.05, 0.25, false};
  m.run = {120.0, 40, 8, 0, 3, std::nullopt};
  return m;
}

}  // namespace

ModelFacts wan22_t2v_a14b() { return a14b("wan22-t2v-a14b", false); }
ModelFacts wan22_i2v_a14b() { return a14b("wan22-i2v-a14b", true); }

}  // namespace autooptim::models
