// Kernel technique (VAE decoder): the upsamplers' nearest 2x + 3x3 conv computed on the small frame.
// Each output pixel (2i+a, 2j+b) of conv3x3(nearest2x(x)) sees only a 2x2 neighbourhood of x, with the
// 3x3 taps summed into 2x2 per phase (rows: a=0 takes {W0, W1+W2} at {i-1, i}, a=1 takes {W0+W1, W2} at
// {i, i+1}; columns alike). One 2x2 conv over the padded frame gives all four phases as 4x the channels;
// they are interleaved into the output. 4/9 of the multiply-adds, and the 4x upsampled input is never
// made. The folded weights are summed in float32 and rounded once.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_subpixel_upsample_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_subpixel_upsample) {
  Technique t;
  t.name = "vae_subpixel_upsample";
  t.family = "kernel";
  t.lossless = false;  // the same sum in another order (taps pre-summed): not bit-identical
  t.summary =
      "VAE upsamplers: nearest 2x + 3x3 conv as one 2x2 conv of four phases on the small frame (4/9 of the work)";
  t.flags = {bool_flag("vae_subpixel_upsample", field(&VaeSubpixelUpsampleOptions::on),
                       "upsample + conv as a sub-pixel 2x2 conv")};
  t.switch_flag = "vae_subpixel_upsample";
  t.exclusive_group = "vae_upsample";  // one way of computing the upsamplers at a time
  t.hooks = {"vae.upsample"};
  t.engagement = {{"kernel.vae_subpixel_upsample.convs",
                   "vae_subpixel_upsample is on but no upsampler ran (the decoder has none?)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_subpixel_upsample", {{"vae_subpixel_upsample", true}}}}
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

// [..., 3 taps, ...] along `dim` -> the two taps of phase a.
at::Tensor fold_taps(const at::Tensor& w, int64_t dim, int a) {
  const at::Tensor w0 = w.select(dim, 0), w1 = w.select(dim, 1), w2 = w.select(dim, 2);
  return a == 0 ? at::stack({w0, w1 + w2}, dim) : at::stack({w0 + w1, w2}, dim);
}

}  // namespace

at::Tensor vae_subpixel_upsample_conv(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight,
                                      const at::Tensor& bias, at::Tensor& folded) {
  const int64_t B = x.size(0), T = x.size(2), H = x.size(3), W = x.size(4), Co = weight.size(0);
  // A one-frame x is both layouts at once: a channels-last decode says which it is.
  const auto fmt = vae_channels_last(&run) ? at::MemoryFormat::ChannelsLast3d : x.suggest_memory_format();
  if (!folded.defined() || folded.scalar_type() != weight.scalar_type() || folded.device() != weight.device()) {
    const at::Tensor wf = weight.to(at::kFloat);  // [Co, C, 3, 3]
    std::vector<at::Tensor> phases;
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) phases.push_back(fold_taps(fold_taps(wf, 2, a), 3, b));  // [Co, C, 2, 2]
    folded = at::cat(phases, 0).unsqueeze(2).to(weight.scalar_type()).contiguous(fmt);     // [4 Co, C, 1, 2, 2]
  }
  at::Tensor out;
  {
    at::Tensor xc;
    {
      ProfileScope ps("layout");
      xc = x.to(weight.scalar_type()).contiguous(fmt);
    }
    // The conv pads the frame by one pixel itself (no padded copy of x): [B, 4 Co, T, H+1, W+1].
    const std::vector<int64_t> stride{1, 1, 1}, pad{0, 1, 1};
    if (vae_frame_conv_applies(&run, xc, folded, stride, pad)) {
      out = vae_frame_conv(run, xc, folded, bias.repeat({4}), stride, pad);
    } else {
      ProfileScope ps("conv", [&] { return conv_detail(xc, folded, stride, pad); });
      out = at::conv3d(xc, folded, bias.repeat({4}), stride, pad);
    }
  }
  ProfileScope ps("layout", [&] {
    return ProfileDetail{"sub-pixel phase interleave", 0,
                         2.0 * static_cast<double>(B * Co * T * 4 * H * W) * out.element_size()};
  });
  at::Tensor y = at::empty({B, Co, T, 2 * H, 2 * W}, out.options().memory_format(fmt));
  // y as [B, Co, T, H, 2, W, 2]: phase (a, b) of pixel (i, j) is y[..., i, a, j, b].
  const at::Tensor y7 = y.as_strided({B, Co, T, H, 2, W, 2}, {y.stride(0), y.stride(1), y.stride(2), 2 * y.stride(3),
                                                              y.stride(3), 2 * y.stride(4), y.stride(4)});
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      y7.select(6, b).select(4, a).copy_(out.narrow(1, (a * 2 + b) * Co, Co).narrow(3, a, H).narrow(4, b, W));
  run.count("kernel.vae_subpixel_upsample.convs");
  return y;
}

AUTOOPTIM_EXTENSIONS(vae_subpixel_upsample) {
  points.vae_upsample.add(
      {"vae_subpixel_upsample", 10, [](const RuntimeOptions& o) { return o.of<VaeSubpixelUpsampleOptions>().on; },
       [](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, TechniqueState& state,
          const VaeRun& run) -> std::optional<at::Tensor> {
         return vae_subpixel_upsample_conv(run, x, weight, bias, state.get<at::Tensor>("vae_subpixel_upsample"));
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
