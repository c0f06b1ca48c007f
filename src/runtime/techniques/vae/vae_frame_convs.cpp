// Kernel technique (VAE decoder): the decoder's convs whose kernel spans one frame (the sub-pixel
// upsampler's 2x2, the 3x3 upsampling conv, the 1x1x1 shortcuts) run as 2D convs over the frames. In
// channels_last_3d, [B, C, T, H, W] is stored as [B, T, H, W, C]: the same memory is a channels-last
// [B*T, C, H, W] batch, so the 2D conv takes it without a copy, and cuDNN's 2D kernels serve these
// shapes better than its 3D ones (the profile measured the 1x2x2 convs at ~340 TFLOP/s as 3D convs,
// against ~700 for the 3x3x3 ones). Another kernel sums in another order: judged by the quality gate.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_frame_convs_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_frame_convs) {
  Technique t;
  t.name = "vae_frame_convs";
  t.family = "kernel";
  t.lossless = false;  // another conv kernel: not bit-identical
  t.summary = "the VAE's one-frame convs (upsampling, shortcuts) as 2D convs over the frames, a view in channels-last";
  t.flags = {
      bool_flag("vae_frame_convs", field(&VaeFrameConvsOptions::on), "one-frame VAE convs as 2D convs over frames")};
  t.switch_flag = "vae_frame_convs";
  t.hooks = {"vae.conv"};
  t.engagement = {
      {"kernel.vae_frame_convs.convs", "vae_frame_convs is on but no conv ran as 2D (it needs vae_channels_last)"}};
  // GPU only: libtorch's CPU convs return channels-first, so on the CPU no one-frame conv sees a
  // channels-last input and the switch never engages.
  t.search = [](const SearchContext& c) {
    return c.gpu
               ? std::vector<SearchPoint>{{"vae_frame_convs", {{"vae_frame_convs", true}, {"vae_channels_last", true}}}}
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

bool vae_frame_conv_applies(const VaeRun* run, const at::Tensor& x, const at::Tensor& weight, at::IntArrayRef stride,
                            at::IntArrayRef padding) {
  return run && run->options && run->options->of<VaeFrameConvsOptions>().on && x.dim() == 5 && weight.dim() == 5 &&
         weight.size(2) == 1 && stride.size() == 3 && stride[0] == 1 && padding.size() == 3 && padding[0] == 0 &&
         x.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}

at::Tensor vae_frame_conv(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding) {
  const at::Tensor x4 = frames_as_images(x);
  const at::Tensor w4 = weight.squeeze(2).contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor y4;
  {
    ProfileScope ps("conv", [&] { return conv_detail(x4, w4, stride.slice(1), padding.slice(1)); });
    y4 = at::conv2d(x4, w4, bias, stride.slice(1), padding.slice(1));
  }
  run.count("kernel.vae_frame_convs.convs");
  return images_as_frames(y4, x.size(0), x.size(2));
}

// The per-frame 2D conv at the decoder's conv point, for the convs without temporal taps or context.
AUTOOPTIM_EXTENSIONS(vae_frame_convs) {
  points.vae_conv.add({"vae_frame_convs", 10, [](const RuntimeOptions& o) { return o.of<VaeFrameConvsOptions>().on; },
                       [](const at::Tensor& in, const ext::VaeConv& c, const VaeRun& run) -> std::optional<at::Tensor> {
                         if (c.causal || !vae_frame_conv_applies(&run, in, c.weight, c.stride, c.padding))
                           return std::nullopt;
                         return vae_frame_conv(run, in, c.weight, c.bias, c.stride, c.padding);
                       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
