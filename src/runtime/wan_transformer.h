#pragma once
// WanTransformer3DModel (diffusers), the denoiser of Wan2.2-TI2V-5B. Registered module names are the
// checkpoint keys (blocks.0.attn1.to_q.weight, ...). See docs/runtime.md and ../shared/docs/wan22-spec.md.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "runtime/extension_points.h"
#include "runtime/forward_context.h"
#include "runtime/nn.h"

namespace autooptim::runtime {

struct WanTransformerConfig {
  std::vector<int64_t> patch_size{1, 2, 2};
  int64_t num_attention_heads = 24;
  int64_t attention_head_dim = 128;
  int64_t in_channels = 48;
  int64_t out_channels = 48;
  int64_t text_dim = 4096;
  int64_t freq_dim = 256;
  int64_t ffn_dim = 14336;
  int64_t num_layers = 30;
  bool cross_attn_norm = true;
  std::string qk_norm = "rms_norm_across_heads";
  double eps = 1e-6;
  int64_t rope_max_seq_len = 1024;

  int64_t dim() const { return num_attention_heads * attention_head_dim; }
  // Reads a diffusers config.json object; unsupported settings (image_dim, added_kv_proj_dim, other
  // qk_norm kinds) are errors naming the key.
  static WanTransformerConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  static WanTransformerConfig ti2v_5b() { return {}; }
};

// Where the model keeps float32 although the rest is in the compute dtype (diffusers'
// _keep_in_fp32_modules: time_embedder, scale_shift_table, norm1/2/3).
struct Precision {
  at::ScalarType compute = at::kFloat;  // linear layers, attention, the residual stream between blocks
  at::Device device = at::kCPU;
  at::TensorOptions compute_opts() const { return at::TensorOptions().dtype(compute).device(device); }
  at::TensorOptions fp32_opts() const { return at::TensorOptions().dtype(at::kFloat).device(device); }
};

// Optional capture of module outputs by name ("blocks.0.out", ...) for golden comparisons.
using Intermediates = std::map<std::string, at::Tensor>;

class WanAttentionImpl : public torch::nn::Module {
 public:
  WanAttentionImpl(int64_t dim, int64_t kv_dim, int64_t heads, double eps, const Precision& p);
  // x [B, L, D]; ctx [B, S, D] (cross) or undefined (self); rope cos/sin [L, d/2] or undefined.
  // fc (optional) carries the technique switches; ctx_key identifies the prompt for the K/V cache.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& ctx, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                     const ForwardContext* fc = nullptr, const void* ctx_key = nullptr) const;
  Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out0{nullptr};
  RMSNorm norm_q{nullptr}, norm_k{nullptr};
  int64_t heads;
  mutable TechniqueState state;  // what techniques derive from the weights (fused_qkv's merged weights)
};
TORCH_MODULE(WanAttention);

class WanBlockImpl : public torch::nn::Module {
 public:
  WanBlockImpl(const WanTransformerConfig& c, const Precision& p);
  // x [B, L, D] (compute dtype); ctx [B, S, D]; tproj [B, 6, D] or [B, L, 6, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& ctx, const at::Tensor& tproj, const at::Tensor& rope_cos,
                     const at::Tensor& rope_sin, const ForwardContext* fc = nullptr,
                     const void* ctx_key = nullptr) const;
  // The self-attention's input: layer-normed x [B, L, D] shifted and scaled by the modulation of tproj.
  at::Tensor modulated_input(const at::Tensor& x, const at::Tensor& tproj) const;
  // The FFN on the modulated h [B, L, D] -> [B, L, D], through its extension points.
  at::Tensor feed_forward(const at::Tensor& h, const ext::TransformerPoints& pts, const ForwardContext* fc) const;
  WanAttention attn1{nullptr}, attn2{nullptr};
  LayerNorm norm2{nullptr};
  Linear ffn_in{nullptr}, ffn_out{nullptr};
  at::Tensor scale_shift_table;  // [1, 6, D] fp32
  double eps;
};
TORCH_MODULE(WanBlock);

class WanTransformer3DModelImpl : public torch::nn::Module {
 public:
  WanTransformer3DModelImpl(const WanTransformerConfig& c, const Precision& p = {});

  // x [B, Cin, F, H, W]; t [B] (one timestep per sample) or [B, L] (one per token, TI2V);
  // ctx [B, S, text_dim]. Returns the flow velocity [B, Cout, F, H, W] in the compute dtype.
  // fc (optional): technique switches, trace and per-generation caches; null is the baseline.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& ctx, Intermediates* inter = nullptr,
                     const ForwardContext* fc = nullptr);

  // Pieces of the forward, public so techniques and tests can call them.
  // Sinusoid [N, freq_dim] of timesteps t [N] (float32, cos first).
  at::Tensor time_sinusoid(const at::Tensor& t) const;
  // t [N] -> temb [N, D] (compute dtype) and the block modulation projection [N, 6D].
  std::pair<at::Tensor, at::Tensor> time_embedding(const at::Tensor& t) const;
  // cos/sin [F*H*W, d/2] angles of each token's (f, h, w) position after patching.
  std::pair<at::Tensor, at::Tensor> rope(int64_t f, int64_t h, int64_t w) const;

  const WanTransformerConfig& config() const { return config_; }
  const Precision& precision() const { return precision_; }

  Conv3d patch_embedding{nullptr};
  Linear time_linear_1{nullptr}, time_linear_2{nullptr}, time_proj{nullptr};
  Linear text_linear_1{nullptr}, text_linear_2{nullptr};
  List blocks{nullptr};
  std::vector<WanBlock> block_list;
  Linear proj_out{nullptr};
  at::Tensor scale_shift_table;  // [1, 2, D] fp32

 private:
  // What the blocks are conditioned on: the time embedding and its projection, the projected text and the
  // rotary tables of the grid.
  struct Conditioning {
    at::Tensor temb, tproj, text, cos, sin;
    bool per_token = false;  // temb [B, L, D] and tproj [B, L, 6, D] (else [B, D] and [B, 6, D])
  };
  using Recorder = std::function<void(const std::string&, const at::Tensor&)>;
  Conditioning condition(const at::Tensor& t, const at::Tensor& ctx, int64_t F, int64_t H, int64_t W,
                         const ext::TransformerPoints& pts, const ForwardContext* fc, const Recorder& record) const;
  // Patch embedding, blocks and head on inputs {x, temb, tproj, text, cos, sin}; fcb is &bfc or null.
  at::Tensor forward_body(const std::vector<at::Tensor>& in, ForwardContext* fcb, ForwardContext& bfc, bool per_token,
                          const void* ctx_key, const Recorder& record);

  WanTransformerConfig config_;
  Precision precision_;
  at::Tensor rope_freqs_;                   // [max_seq_len, d/2] float64 angles of all three axes' tables, see rope()
  mutable TechniqueState technique_state_;  // what techniques keep per model (rope_cache's tables)
};
TORCH_MODULE(WanTransformer3DModel);

}  // namespace autooptim::runtime
