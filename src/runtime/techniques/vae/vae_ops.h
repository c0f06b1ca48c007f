#pragma once
// The VAE decoder's kernel switches (runtime compilation only: libtorch). Each is defined in its
// technique's file in this folder, which registers it at the decoder's extension points
// (runtime/extension_points.h); the decoder (wan_vae.cpp) calls the points, never these.
#include <ATen/ATen.h>

#include <functional>
#include <memory>

#include "runtime/options.h"
#include "runtime/trace.h"
#include "runtime/wan_vae.h"  // VaeRun, WanCausalCache
#include "runtime/techniques/vae/vae_channels_last_options.h"

namespace autooptim::runtime::techniques {

// What one decode runs with (the model's type): the switches and where their engagement is counted.
using VaeRun = runtime::VaeRun;

// Whether this decode runs channels-last (vae_channels_last). Where a tensor is made or reshaped, the
// decoder says so explicitly: a one-frame tensor is both layouts at once, and libtorch then falls back to
// channels-first.
inline bool vae_channels_last(const VaeRun* run) {
  return run && run->options && run->options->of<VaeChannelsLastOptions>().on;
}

// vae_causal_ring.cpp: the chunks a causal conv's buffer holds for a batch of B (1 where the switch is off
// or a window would not be a dense tensor in the conv's layout).
int64_t vae_causal_ring(const VaeRun* run, int64_t B);

// In channels_last_3d, [B, C, T, H, W] is stored as [B, T, H, W, C]: the same memory is a channels-last
// [B*T, C, H, W] batch of frames. x must be channels_last_3d; the result is a view.
inline at::Tensor frames_as_images(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3), x.size(4)});
}
// The way back: [B*T, C, H, W] -> [B, C, T, H, W] in channels_last_3d; a view when y is channels-last
// (cuDNN wrote NHWC), else one copy.
inline at::Tensor images_as_frames(const at::Tensor& y, int64_t B, int64_t T) {
  return y.contiguous(at::MemoryFormat::ChannelsLast).view({B, T, y.size(1), y.size(2), y.size(3)}).transpose(1, 2);
}

// vae_fused_norm_silu.cpp: whether the fused kernel can take x (bf16 on the GPU, a CUDA build).
bool vae_norm_silu_applies(const VaeRun* run, const at::Tensor& x);
// silu(rms_norm(x) * gamma) written into dst (same shape as x; any strides, e.g. a frame range of a
// causal conv's buffer).
void vae_norm_silu_into(const VaeRun& run, const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& dst);

// vae_subpixel_upsample.cpp: nearest 2x upsampling of each frame then a 3x3 conv (padding 1), computed as
// one 2x2 conv of four output phases on the small frame: x [B, C, T, H, W], weight [Co, C, 3, 3] ->
// [B, Co, T, 2H, 2W]. `folded` caches the phases' weights [4 Co, C, 1, 2, 2] (built on first use).
at::Tensor vae_subpixel_upsample_conv(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight,
                                      const at::Tensor& bias, at::Tensor& folded);

// vae_transposed_upsample.cpp: the same upsampling as one stride-2 transposed conv with 4x4 taps per frame:
// x [B, C, T, H, W], weight [Co, C, 3, 3] -> [B, Co, T, 2H, 2W] (channels-last in such a decode).
// `folded` caches the transposed conv's weights [C, Co, 4, 4] (built on first use).
at::Tensor vae_transposed_upsample_weight(const at::Tensor& weight);
at::Tensor vae_transposed_upsample_conv(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& bias, at::Tensor& folded);

// vae_head_pad.cpp: whether the decoder's output conv (weight [Co, ...]) is to be padded to more output
// channels, and that conv: [B, Co, T', H, W], a channel view of the padded conv's output. The padded
// weight and bias are cached in the two tensors given (rebuilt when the padding changes).
bool vae_head_pad_applies(const VaeRun* run, const at::Tensor& weight);
at::Tensor vae_head_pad_conv(const VaeRun& run, const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& padded_weight,
                             at::Tensor& padded_bias);

// vae_fused_shortcut.cpp: whether h += DupUp3D(x) can run fused, and the in-place add (ft: the block's
// temporal factor; first_chunk drops the first ft-1 frames of the shortcut as DupUp3D does).
bool vae_dup_up_add_applies(const VaeRun* run, const at::Tensor& h, const at::Tensor& x);
void vae_dup_up_add_(const VaeRun& run, at::Tensor& h, const at::Tensor& x, int64_t ft, bool first_chunk);

// vae_frame_convs.cpp: whether a conv of x by weight [Co, C, 1, kh, kw] can run as a 2D conv over the
// frames (the switch on, x in channels_last_3d, no temporal stride or padding), and that conv: the
// result is [B, Co, T, H', W'] in channels_last_3d.
bool vae_frame_conv_applies(const VaeRun* run, const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef stride,
                            at::IntArrayRef padding);
at::Tensor vae_frame_conv(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding);

// vae_pointwise_gemm.cpp: whether a conv of x by a 1x1x1 weight [Co, C, 1, 1, 1] (no stride, no padding)
// can run as one GEMM over the voxels (the switch on, x in channels_last_3d), and that GEMM: the result
// is [B, Co, T, H, W] in channels_last_3d.
bool vae_pointwise_gemm_applies(const VaeRun* run, const at::Tensor& x, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef padding);
at::Tensor vae_pointwise_gemm(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// vae_cuda_graph.cpp: the decoder's chunks through CUDA graphs. One per decode; chunk(k, in, cache, body)
// returns body(in) for the k-th chunk (in: its latent frames), run eagerly or replayed from the graph of
// its length (and ring position), captured at the first steady chunk of that length. A replayed chunk's
// result is the graph's output tensor: valid until the next chunk.
class VaeChunkGraphs : public ext::VaeChunkRunner {
 public:
  using Body = std::function<at::Tensor(const at::Tensor& in)>;
  explicit VaeChunkGraphs(const VaeRun* run);
  ~VaeChunkGraphs() override;
  VaeChunkGraphs(const VaeChunkGraphs&) = delete;
  VaeChunkGraphs& operator=(const VaeChunkGraphs&) = delete;
  bool engaged() const;  // the switch is on (whether a chunk can replay is decided per chunk)
  at::Tensor chunk(int64_t k, const at::Tensor& in, WanCausalCache& cache, const Body& body) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace autooptim::runtime::techniques
