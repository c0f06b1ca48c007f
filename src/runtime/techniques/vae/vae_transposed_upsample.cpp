// Kernel technique (VAE decoder): the upsamplers' nearest 2x + 3x3 conv as one stride-2 transposed conv
// with a 4x4 kernel per frame. conv_transpose writes input pixel i to outputs 2i - 1 + k (k = 0..3):
// output row 2i takes x[i-1] through tap 3 and x[i] through tap 1, row 2i+1 takes x[i] through tap 2
// and x[i+1] through tap 0. The sub-pixel phases' folded taps (vae_subpixel_upsample.cpp) are therefore
// the 4 taps [W2, W1+W2, W0+W1, W0] along each axis, and cuDNN's strided data-gradient kernel writes the
// 2x frame itself: no phase interleave copy and no padded copy of the input, which the sub-pixel form
// needs (the profile measured its interleave at 69 ms of a 3.5 s official-shape decode). The same 4/9
// of the multiply-adds; another summation order: judged by the quality gate.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_transposed_upsample_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_transposed_upsample) {
  Technique t;
  t.name = "vae_transposed_upsample";
  t.family = "kernel";
  t.lossless = false;  // the taps pre-summed, another kernel: not bit-identical
  t.summary =
      "VAE upsamplers: nearest 2x + 3x3 conv as one stride-2 4x4 transposed conv per frame (no interleave copy)";
  t.flags = {bool_flag("vae_transposed_upsample", field(&VaeTransposedUpsampleOptions::on),
                       "upsample + conv as a stride-2 transposed conv")};
  t.switch_flag = "vae_transposed_upsample";
  t.exclusive_group = "vae_upsample";  // one way of computing the upsamplers at a time
  t.hooks = {"vae.upsample"};
  t.engagement = {{"kernel.vae_transposed_upsample.convs",
                   "vae_transposed_upsample is on but no upsampler ran (the decoder has none?)"}};
  // GPU only: what it saves is a copy that cuDNN's strided kernel avoids; on the CPU libtorch's transposed
  // conv is a slow im2col path.
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_transposed_upsample", {{"vae_transposed_upsample", true}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/profile.h"
#include "runtime/techniques/vae/vae_ops.h"

namespace autooptim::runtime::techniques {
namespace {

// [..., 3 taps, ...] along `dim` -> the transposed conv's 4 taps [W2, W1+W2, W0+W1, W0].
at::Tensor spread_taps(const at::Tensor& w, int64_t dim) {
  const at::Tensor w0 = w.select(dim, 0), w1 = w.select(dim, 1), w2 = w.select(dim, 2);
  return at::stack({w2, w1 + w2, w0 + w1, w0}, dim);
}

}  // namespace

at::Tensor vae_transposed_upsample_weight(const at::Tensor& weight) {
  const at::Tensor wf = weight.to(at::kFloat);                                         // [Co, C, 3, 3]
  return spread_taps(spread_taps(wf, 2), 3).transpose(0, 1).to(weight.scalar_type());  // [C, Co, 4, 4]
}

at::Tensor vae_transposed_upsample_conv(const VaeRun& run, const at::Tensor& x_in, const at::Tensor& weight,
                                        const at::Tensor& bias, at::Tensor& folded) {
  const at::Tensor x = x_in.to(weight.scalar_type());
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4), Co = weight.size(0);
  // A one-frame x is both layouts at once: a channels-last decode says which it is.
  const bool cl =
      vae_channels_last(&run) || (T > 1 && x.is_contiguous(at::MemoryFormat::ChannelsLast3d) && !x.is_contiguous());
  if (!folded.defined() || folded.scalar_type() != weight.scalar_type() || folded.device() != weight.device()) {
    const at::Tensor w = vae_transposed_upsample_weight(weight);  // [C, Co, 4, 4]
    folded = cl ? w.contiguous(at::MemoryFormat::ChannelsLast) : w.contiguous();
  }
  ProfileScope ps("conv", [&] {
    const std::string shape = std::to_string(C) + "->" + std::to_string(Co) + " transposed k4x4 s2 out " +
                              std::to_string(B * T) + "x" + std::to_string(2 * H) + "x" + std::to_string(2 * W) +
                              (cl ? " cl " : " ") + std::string(c10::toString(x.scalar_type()));
    // The useful work: each output pixel sums 2x2 taps of C channels.
    return ProfileDetail{shape, 2.0 * static_cast<double>(B * T) * Co * (2 * H) * (2 * W) * C * 4};
  });
  run.count("kernel.vae_transposed_upsample.convs");
  if (cl) {
    // The frames as one NHWC batch (a copy only if x was not channels-last after all).
    const at::Tensor x4 = frames_as_images(x.contiguous(at::MemoryFormat::ChannelsLast3d));
    return images_as_frames(at::conv_transpose2d(x4, folded, bias, {2, 2}, {1, 1}), B, T);  // [B, Co, T, 2H, 2W]
  }
  return at::conv_transpose3d(x, folded.unsqueeze(2), bias, {1, 2, 2}, {0, 1, 1});  // [B, Co, T, 2H, 2W]
}

// The transposed conv at the decoder's upsample point, before the sub-pixel form.
AUTOOPTIM_EXTENSIONS(vae_transposed_upsample) {
  points.vae_upsample.add(
      {"vae_transposed_upsample", 20, [](const RuntimeOptions& o) { return o.of<VaeTransposedUpsampleOptions>().on; },
       [](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, TechniqueState& state,
          const VaeRun& run) -> std::optional<at::Tensor> {
         return vae_transposed_upsample_conv(run, x, weight, bias, state.get<at::Tensor>("vae_transposed_upsample"));
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
