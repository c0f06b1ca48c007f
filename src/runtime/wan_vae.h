#pragma once
// AutoencoderKLWan (diffusers) in both its structures: Wan2.2's (residual down/up blocks with average and
// duplicate shortcuts, patch size 2, 16x spatial compression) and Wan2.1's (is_residual false: plain residual
// blocks and resamplers in flat lists, upsamplers halving the channels, no patchify, 8x spatial); both 4x
// temporal. Registered module names are the checkpoint keys
// (encoder.down_blocks.0.resnets.0.conv1.weight, ...). The causal 3D convolutions run chunk by chunk
// with a per-conv cache of the last two input frames, as the reference does: decode one latent frame
// per chunk, encode frame chunks [0], [1..4], [5..8], ... See ../shared/docs/wan22-spec.md section 2.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/extension_points.h"
#include "runtime/nn.h"
#include "runtime/options.h"
#include "runtime/trace.h"
#include "runtime/wan_transformer.h"  // Precision, Intermediates

namespace autooptim::runtime {

// What one decode runs with: the technique switches, where their engagement is counted, and the
// overrides of the decoder's extension points that are on (resolved from the options on first use).
struct VaeRun {
  const RuntimeOptions* options = nullptr;
  Trace* trace = nullptr;
  mutable std::shared_ptr<const ext::VaePoints> resolved = nullptr;

  void count(const char* key, double v = 1.0) const {
    if (trace) trace->add(key, v);
  }
  const ext::VaePoints& points() const;
};

struct WanVAEConfig {
  int64_t base_dim = 160;
  int64_t decoder_base_dim = 256;
  int64_t z_dim = 48;
  std::vector<int64_t> dim_mult{1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<double> attn_scales;
  std::vector<bool> temperal_downsample{false, true, true};  // the checkpoint's spelling
  bool is_residual = true;
  int64_t in_channels = 12;   // channels into encoder.conv_in: 3 colours x patch_size^2
  int64_t out_channels = 12;  // channels out of decoder.conv_out
  int64_t patch_size = 2;     // 1 = no patchify (a null patch_size in the json)
  int64_t scale_factor_spatial = 16;
  int64_t scale_factor_temporal = 4;
  std::vector<double> latents_mean;  // [z_dim]
  std::vector<double> latents_std;   // [z_dim]

  // Pixel channels of a video: in_channels / patch_size^2.
  int64_t video_channels() const { return in_channels / (patch_size * patch_size); }
  // Reads a diffusers vae/config.json object; missing keys keep the TI2V-5B values. Errors name the key;
  // settings this implementation does not run (is_residual false, attention scales, ...) are errors.
  static WanVAEConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  static WanVAEConfig ti2v_5b();
  static WanVAEConfig wan21();  // the Wan2.1 VAE of the A14B models (diffusers' AutoencoderKLWan defaults)
};

// Per-conv caches of one encode or decode: slot i belongs to the i-th cached conv in call order, and
// holds that conv's last (up to) two input frames of the previous chunk. "rep" marks an upsample3d
// whose first chunk skipped its time_conv (the reference's "Rep" sentinel).
struct WanCausalCache {
  struct Slot {
    at::Tensor frames;  // [B, C, 1 or 2, H, W] or undefined (first chunk); with vae_causal_buffer the
                        // conv's buffer [B, C, 2 + R*T, H, W] (R: vae_causal_ring, 1 when off), the
                        // context the two frames from `pos`
    int64_t pos = 0;    // vae_causal_buffer: where the next chunk's window [context, chunk] starts
    bool rep = false;
  };
  std::vector<Slot> slots;
  size_t next = 0;
  const VaeRun* run = nullptr;  // the kernel switches of this decode (null: the reference path)
  Slot& take();
  void begin_chunk() { next = 0; }
};

class WanRMSNormImpl;

// Conv3d whose temporal padding is 2*pad_t zero frames at the front only, replaced by cached frames.
class WanCausalConv3dImpl : public torch::nn::Module {
 public:
  WanCausalConv3dImpl(int64_t in, int64_t out, std::vector<int64_t> kernel, std::vector<int64_t> padding,
                      std::vector<int64_t> stride, const at::TensorOptions& opts);
  // x [B, Cin, T, H, W]; cache [B, Cin, n<=2, H, W] or undefined -> [B, Cout, T', H, W].
  // run: the decode's kernel switches, where the caller has them (vae_frame_convs for a 1x1x1 conv).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cache = {}, const VaeRun* run = nullptr) const;
  // The cached form: takes the next slot of `cache`, uses its frames as front context and keeps the
  // last two frames of x (with the slot's last frame ahead of a single-frame x) for the next chunk.
  at::Tensor forward_cached(const at::Tensor& x, WanCausalCache& cache) const;
  // conv(silu(norm(x))) in the cached form, through the decode's extension points (norm + SiLU, the
  // cached conv) where it has overrides on; the reference ops otherwise.
  at::Tensor forward_cached_norm_silu(const at::Tensor& x, const WanRMSNormImpl& norm, WanCausalCache& cache) const;
  // The conv of an input already padded in time, through the decode's conv point.
  at::Tensor conv(const at::Tensor& in, const VaeRun* run) const;
  at::Tensor weight, bias;
  int64_t front_pad;
  std::vector<int64_t> stride, spatial_pad;
  bool output_head = false;                       // the decoder's conv_out
  mutable at::Tensor padded_weight, padded_bias;  // the output head's padded copies (vae_head_pad), made on first use
};
TORCH_MODULE(WanCausalConv3d);

// L2 normalisation over channels times sqrt(C) times gamma, statistics in float32.
class WanRMSNormImpl : public torch::nn::Module {
 public:
  // images: gamma [C, 1, 1] (attention, per frame) instead of [C, 1, 1, 1].
  WanRMSNormImpl(int64_t dim, bool images, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x) const;  // x [B, C, ...]
  // silu(forward(x)), through the decode's norm+SiLU point where it has one on.
  at::Tensor forward_silu(const at::Tensor& x, const VaeRun* run) const;
  // The same written into dst (same shape as x, any strides: e.g. a frame range of a causal conv's buffer).
  void forward_silu_into(const at::Tensor& x, const at::Tensor& dst, const VaeRun* run) const;
  at::Tensor gamma;
};
TORCH_MODULE(WanRMSNorm);

class WanResidualBlockImpl : public torch::nn::Module {
 public:
  WanResidualBlockImpl(int64_t in, int64_t out, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache) const;
  WanRMSNorm norm1{nullptr}, norm2{nullptr};
  WanCausalConv3d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
};
TORCH_MODULE(WanResidualBlock);

// Single-head self-attention over the H*W positions of each frame.
class WanAttentionBlockImpl : public torch::nn::Module {
 public:
  WanAttentionBlockImpl(int64_t dim, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x) const;  // [B, C, T, H, W] -> same
  WanRMSNorm norm{nullptr};
  Conv2d to_qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(WanAttentionBlock);

class WanMidBlockImpl : public torch::nn::Module {
 public:
  WanMidBlockImpl(int64_t dim, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache) const;
  std::vector<WanResidualBlock> resnets;  // 2
  WanAttentionBlock attention{nullptr};
};
TORCH_MODULE(WanMidBlock);

// Spatial 2x resampling per frame (resample.1 is the Conv2d), with a causal temporal conv for the
// 3D modes: upsample3d doubles the frames, downsample3d halves them. The upsampling conv maps dim to
// upsample_out channels (0: dim, Wan2.2's; Wan2.1's halves them).
class WanResampleImpl : public torch::nn::Module {
 public:
  enum class Mode { kUpsample2d, kUpsample3d, kDownsample2d, kDownsample3d };
  WanResampleImpl(int64_t dim, Mode mode, const at::TensorOptions& opts, int64_t upsample_out = 0);
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache) const;
  Mode mode;
  mutable TechniqueState state;  // what the upsampling techniques derive from the weights (folded taps)
  Conv2d resample{nullptr};
  WanCausalConv3d time_conv{nullptr};  // upsample3d: dim -> 2*dim, (3,1,1); downsample3d: stride 2
};
TORCH_MODULE(WanResample);

class WanResidualDownBlockImpl : public torch::nn::Module {
 public:
  WanResidualDownBlockImpl(int64_t in, int64_t out, int64_t num_res_blocks, bool temporal, bool down,
                           const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache) const;
  std::vector<WanResidualBlock> resnets;
  WanResample downsampler{nullptr};
  int64_t in_dim, out_dim, factor_t, factor_s;  // AvgDown3D shortcut
};
TORCH_MODULE(WanResidualDownBlock);

// One decoder stage: num_res_blocks + 1 residual blocks, then (but in the last stage) an upsampler.
// residual (Wan2.2): the upsampler keeps the channels, is named "upsampler", and the DupUp3D shortcut of
// the stage's input is added; plain (Wan2.1): "upsamplers.0", which halves the channels, no shortcut.
class WanUpBlockImpl : public torch::nn::Module {
 public:
  WanUpBlockImpl(int64_t in, int64_t out, int64_t num_res_blocks, bool temporal, bool up, bool residual,
                 const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache, bool first_chunk) const;
  std::vector<WanResidualBlock> resnets;
  WanResample upsampler{nullptr};
  bool up, residual;
  int64_t in_dim, out_dim, factor_t;  // DupUp3D shortcut (spatial factor 2)
};
TORCH_MODULE(WanUpBlock);

// One entry of Wan2.1's encoder.down_blocks, a flat list of residual blocks and downsamplers: exactly one
// of the two is set.
struct WanDownLayer {
  WanResidualBlock resnet{nullptr};
  WanResample downsampler{nullptr};
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache) const;
};

class WanEncoder3dImpl : public torch::nn::Module {
 public:
  WanEncoder3dImpl(const WanVAEConfig& c, const at::TensorOptions& opts);
  // One chunk: x [B, in_channels, t, H, W] -> [B, 2*z_dim, t', H/2^n, W/2^n].
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache) const;
  WanCausalConv3d conv_in{nullptr}, conv_out{nullptr};
  std::vector<WanResidualDownBlock> down_blocks;  // Wan2.2
  std::vector<WanDownLayer> down_layers;          // Wan2.1 (the same checkpoint list, flat)
  WanMidBlock mid_block{nullptr};
  WanRMSNorm norm_out{nullptr};
};
TORCH_MODULE(WanEncoder3d);

class WanDecoder3dImpl : public torch::nn::Module {
 public:
  WanDecoder3dImpl(const WanVAEConfig& c, const at::TensorOptions& opts);
  // One latent frame: x [B, z_dim, 1, h, w] -> [B, out_channels, 1 (first chunk) or 4, h*2^n, w*2^n].
  // record(name, tensor) receives the module outputs named as the golden intermediates.
  at::Tensor forward(const at::Tensor& x, WanCausalCache& cache, bool first_chunk,
                     const std::function<void(const std::string&, const at::Tensor&)>& record) const;
  WanCausalConv3d conv_in{nullptr}, conv_out{nullptr};
  WanMidBlock mid_block{nullptr};
  std::vector<WanUpBlock> up_blocks;
  WanRMSNorm norm_out{nullptr};
};
TORCH_MODULE(WanDecoder3d);

class AutoencoderKLWanImpl : public torch::nn::Module {
 public:
  AutoencoderKLWanImpl(const WanVAEConfig& c, const Precision& p = {});

  // z [B, z_dim, T, h, w] raw latents (already un-normalised) -> video [B, 3, 1+4(T-1), s*h, s*w] in
  // the compute dtype, clamped to [-1, 1]. inter receives post_quant_conv and decoder.* outputs, each
  // concatenated over chunks along time.
  // run: the technique switches and their overrides; null runs the reference path.
  at::Tensor decode(const at::Tensor& z, Intermediates* inter = nullptr, const VaeRun* run = nullptr);
  // Same, streaming: sink gets each latent frame's pixel frames [B, 3, n, H, W] (n = 1 for the first
  // latent frame, then 4), so only one chunk's activations and the caches are alive at a time.
  void decode_streaming(const at::Tensor& z, const std::function<void(const at::Tensor&)>& sink);
  // decode without the final clamp, for training (a clamped output has no gradient past +-1).
  at::Tensor decode_unclamped(const at::Tensor& z);
  // video [B, 3, T, H, W] in [-1, 1], T = 1 + 4k, H and W multiples of the spatial factor ->
  // {mean, logvar (clamped to [-30, 20])}, each [B, z_dim, 1+k, H/s, W/s] (s: the spatial factor).
  std::pair<at::Tensor, at::Tensor> encode(const at::Tensor& video);
  at::Tensor normalize(const at::Tensor& mu) const;   // (mu - latents_mean) / latents_std per channel
  at::Tensor denormalize(const at::Tensor& z) const;  // z * latents_std + latents_mean

  const WanVAEConfig& config() const { return config_; }
  const Precision& precision() const { return precision_; }

  WanEncoder3d encoder{nullptr};
  WanDecoder3d decoder{nullptr};
  WanCausalConv3d quant_conv{nullptr}, post_quant_conv{nullptr};

 private:
  void decode_chunks(const at::Tensor& z, Intermediates* inter, const std::function<void(const at::Tensor&)>& sink,
                     const VaeRun* run = nullptr, bool clamp = true);
  WanVAEConfig config_;
  Precision precision_;
};
TORCH_MODULE(AutoencoderKLWan);

// Channel order of the reference's patchify: channel c*p*p + pw*p + ph holds pixel (p*h+ph, p*w+pw).
at::Tensor wan_vae_patchify(const at::Tensor& x, int64_t p);    // [B, C, T, H, W] -> [B, C*p*p, T, H/p, W/p]
at::Tensor wan_vae_unpatchify(const at::Tensor& x, int64_t p);  // inverse

}  // namespace autooptim::runtime
