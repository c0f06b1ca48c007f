// Kernel technique (VAE decoder): the decoder's output conv (256 -> 12 channels at TI2V-5B: 3 colours x
// the 2x2 patch) computed with its output channels padded by zero filters to `vae_head_pad`, and the
// real channels taken back as a view. Twelve output channels are not a multiple of the 8 a bf16
// tensor-core tile wants and fill little of one: the profile measured this conv at 92 TFLOP/s, 49 ms of
// a 3.5 s decode, against 640+ for the 256-channel convs. The extra filters are zeros; the real
// channels are the same sums, though cuDNN may pick another kernel for the padded shape: judged by the
// quality gate.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_head_pad_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_head_pad) {
  Technique t;
  t.name = "vae_head_pad";
  t.family = "kernel";
  t.lossless = false;  // the same sums, but the padded shape may get another conv kernel on the GPU
  t.summary = "VAE decoder's output conv with its output channels padded by zero filters (0: off; 16, 32, ...)";
  t.flags = {int_flag("vae_head_pad", field(&VaeHeadPadOptions::channels), 0, 256,
                      "output channels the VAE decoder's last conv is padded to (a multiple of 8; 0: off)")};
  t.switch_flag = "vae_head_pad";
  t.hooks = {"vae.conv_out"};
  t.engagement = {
      {"kernel.vae_head_pad.convs",
       "vae_head_pad is on but the output conv was not padded (its channels are already at least vae_head_pad)"}};
  t.check_flags = [](const RuntimeOptions& o) -> std::optional<FlagProblem> {
    if (o.of<VaeHeadPadOptions>().channels % 8 != 0)
      return FlagProblem{
          "", "must be 0 (off) or a multiple of 8, got " + std::to_string(o.of<VaeHeadPadOptions>().channels)};
    return std::nullopt;
  };
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_head_pad-16", {{"vae_head_pad", 16}}},
                                            {"vae_head_pad-32", {{"vae_head_pad", 32}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/wan_vae.h"
#include "runtime/profile.h"
#include "runtime/techniques/vae/vae_ops.h"

namespace autooptim::runtime::techniques {

bool vae_head_pad_applies(const VaeRun* run, const at::Tensor& weight) {
  return run && run->options && run->options->of<VaeHeadPadOptions>().channels > weight.size(0);
}

at::Tensor vae_head_pad_conv(const VaeRun& run, const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& padded_weight,
                             at::Tensor& padded_bias) {
  const int64_t co = weight.size(0), pad = run.options->of<VaeHeadPadOptions>().channels;
  if (!padded_weight.defined() || padded_weight.size(0) != pad || padded_weight.scalar_type() != weight.scalar_type() ||
      padded_weight.device() != weight.device()) {
    std::vector<int64_t> shape = weight.sizes().vec();
    shape[0] = pad;
    at::Tensor w = at::zeros(shape, weight.options());
    w.narrow(0, 0, co).copy_(weight);
    // In the weight's own layout (channels-last in such a decode: at::zeros made it channels-first).
    padded_weight = w.contiguous(weight.suggest_memory_format());
    padded_bias = at::zeros({pad}, bias.options());
    padded_bias.narrow(0, 0, co).copy_(bias);
  }
  at::Tensor out;
  {
    ProfileScope ps("conv", [&] { return conv_detail(in, padded_weight, stride, padding); });
    out = at::conv3d(in, padded_weight, padded_bias, stride, padding);
  }
  run.count("kernel.vae_head_pad.convs");
  return out.narrow(1, 0, co);  // a view: the unpatchify after it copies anyway
}

// The padded output head at the decoder's conv point (only the decoder's conv_out), first of its overrides.
AUTOOPTIM_EXTENSIONS(vae_head_pad) {
  points.vae_conv.add({"vae_head_pad", 30,
                       [](const RuntimeOptions& o) { return o.of<VaeHeadPadOptions>().channels > 0; },
                       [](const at::Tensor& in, const ext::VaeConv& c, const VaeRun& run) -> std::optional<at::Tensor> {
                         if (!c.module || !c.module->output_head || !vae_head_pad_applies(&run, c.weight))
                           return std::nullopt;
                         return vae_head_pad_conv(run, in, c.weight, c.bias, c.stride, c.padding,
                                                  c.module->padded_weight, c.module->padded_bias);
                       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
