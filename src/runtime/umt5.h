#pragma once
// UMT5EncoderModel (transformers), the text encoder of Wan2.2-TI2V-5B (umt5-xxl). Registered module
// names are the checkpoint keys (shared.weight, encoder.block.0.layer.0.SelfAttention.q.weight, ...).
// See ../shared/docs/wan22-spec.md section 3. The prompt path (cleaning, tokenizer, padding, zeroing
// of the rows past each prompt) is encode_prompts() at the end of this file.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "runtime/nn.h"
#include "runtime/tokenizer.h"
#include "runtime/wan_transformer.h"  // Precision, Intermediates

namespace autooptim::runtime {

struct UMT5Config {
  int64_t vocab_size = 256384;
  int64_t d_model = 4096;
  int64_t d_kv = 64;
  int64_t d_ff = 10240;
  int64_t num_layers = 24;
  int64_t num_heads = 64;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  std::string feed_forward_proj = "gated-gelu";

  int64_t inner_dim() const { return num_heads * d_kv; }
  // Reads a transformers config.json object; only the gated-gelu feed-forward is supported (umt5).
  static UMT5Config from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  static UMT5Config umt5_xxl() { return {}; }
};

// T5's relative-position bucket of rel = key_pos - query_pos, bidirectional: half the buckets per
// sign (+half when rel > 0); |rel| below half/2 is its own bucket, larger distances are log-spaced
// up to max_distance and capped at the last bucket. rel: int64 tensor of any shape -> same shape.
at::Tensor relative_position_bucket(const at::Tensor& rel, int64_t num_buckets, int64_t max_distance);

class UMT5AttentionImpl : public torch::nn::Module {
 public:
  UMT5AttentionImpl(const UMT5Config& c, const Precision& p);
  // x [B, S, D]; mask_bias [B, 1, 1, S] fp32 (0 or the fp32 minimum at pads) -> [B, S, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask_bias) const;
  // Per-head bias [1, H, S, S] fp32 of this layer's own table (UMT5 has one in every layer).
  at::Tensor position_bias(int64_t s) const;
  Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  at::Tensor relative_attention_bias;  // [num_buckets, H]
  int64_t heads, d_kv, num_buckets, max_distance;
};
TORCH_MODULE(UMT5Attention);

class UMT5BlockImpl : public torch::nn::Module {
 public:
  UMT5BlockImpl(const UMT5Config& c, const Precision& p);
  // x [B, S, D] (compute dtype) -> [B, S, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask_bias) const;
  UMT5Attention self_attention{nullptr};
  RMSNorm attn_norm{nullptr}, ffn_norm{nullptr};  // layer.0.layer_norm, layer.1.layer_norm
  Linear wi_0{nullptr}, wi_1{nullptr}, wo{nullptr};
};
TORCH_MODULE(UMT5Block);

class UMT5EncoderModelImpl : public torch::nn::Module {
 public:
  UMT5EncoderModelImpl(const UMT5Config& c, const Precision& p = {});

  // input_ids [B, S] int64, attention_mask [B, S] (1 real, 0 pad) -> last_hidden_state [B, S, d_model]
  // in the compute dtype; rows at pads are computed, not zeroed. inter gets "hidden_states.0" (the
  // embeddings), "hidden_states.i" after layer i-1 for i < num_layers, and "hidden_states.<num_layers>"
  // = the output after the final norm, as transformers' output_hidden_states.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask, Intermediates* inter = nullptr);

  const UMT5Config& config() const { return config_; }
  const Precision& precision() const { return precision_; }

  at::Tensor shared_weight;                    // shared.weight [vocab, D]
  std::shared_ptr<torch::nn::Module> encoder;  // holds block.N and final_layer_norm
  std::vector<UMT5Block> block_list;
  RMSNorm final_layer_norm{nullptr};

 private:
  UMT5Config config_;
  Precision precision_;
};
TORCH_MODULE(UMT5EncoderModel);

// The tied copy of shared.weight some checkpoints also hold.
inline constexpr const char* kUMT5TiedEmbedding = "encoder.embed_tokens.weight";

// Loads a UMT5 checkpoint (file, index or folder) strictly. encoder.embed_tokens.weight is accepted
// beside shared.weight and used in its place when shared.weight is absent.
void load_umt5(UMT5EncoderModel& m, const TensorSource& src);

// The pipeline's prompt embedding: cleaned, tokenized, padded/truncated to max_length, encoded with the
// mask; rows past each prompt's token count (EOS included) are exact zeros; cast to dtype.
// Returns [B, max_length, d_model] on the model's device.
// trim (the text_trim switch): the encoder runs over the longest prompt's tokens only, not all max_length,
// and the rows after them are the same exact zeros. The masked padding adds nothing to a real token's
// attention (its bias is -inf), so only the order of floating-point sums can differ. *tokens_saved, when
// given, gets the token rows not encoded (B * (max_length - longest)).
at::Tensor encode_prompts(UMT5EncoderModel& m, const Tokenizer& tok, const std::vector<std::string>& prompts,
                          int64_t max_length, at::ScalarType dtype, bool trim = false, int64_t* tokens_saved = nullptr);

}  // namespace autooptim::runtime
