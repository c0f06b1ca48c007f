// Kernel technique (VAE decoder): the decoder's 1x1x1 convs (the residual blocks' channel-changing
// shortcuts, 1024->512 and 512->256 at TI2V-5B) as one GEMM over the voxels. In channels_last_3d
// [B, C, T, H, W] is stored as [B, T, H, W, C]: the same memory is a [voxels, C] matrix, so the conv is
// rows x weight^T + bias with no copy, and the result [voxels, Co] is the channels-last output. The
// profile measured these convs through cuDNN at 205-333 TFLOP/s (~1.2 TB/s; 56 ms of a 3.34 s decode), a
// GEMM of K = 512-1024 and N = 256-512 over ~900k rows that should run near the copy bandwidth.
// Another kernel sums in another order: judged by the quality gate.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_pointwise_gemm_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_pointwise_gemm) {
  Technique t;
  t.name = "vae_pointwise_gemm";
  t.family = "kernel";
  t.lossless = false;  // a GEMM kernel instead of a conv kernel: not bit-identical
  t.summary = "the VAE's 1x1x1 convs (the shortcuts) as one GEMM over the voxels, a view in channels-last";
  t.flags = {
      bool_flag("vae_pointwise_gemm", field(&VaePointwiseGemmOptions::on), "1x1x1 VAE convs as GEMMs over the voxels")};
  t.switch_flag = "vae_pointwise_gemm";
  t.hooks = {"vae.conv"};
  // The Wan VAE's only convs without temporal taps are its 1x1x1 ones, which this takes before vae_frame_convs
  // (seen on the H100 and the CPU: 26 of 26 at the tiny model's decode, the frame convs then ran none).
  t.supersedes = {"vae_frame_convs"};
  t.engagement = {{"kernel.vae_pointwise_gemm.convs",
                   "vae_pointwise_gemm is on but no 1x1x1 conv ran as a GEMM (it needs vae_channels_last)"}};
  // GPU only: libtorch's CPU convs return channels-first, so on the CPU the shortcuts' inputs are not
  // channels-last and the switch never engages.
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_pointwise_gemm",
                                             {{"vae_pointwise_gemm", true}, {"vae_channels_last", true}}}}
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

bool vae_pointwise_gemm_applies(const VaeRun* run, const at::Tensor& x, const at::Tensor& weight,
                                at::IntArrayRef stride, at::IntArrayRef padding) {
  if (!run || !run->options || !run->options->of<VaePointwiseGemmOptions>().on || x.dim() != 5 || weight.dim() != 5)
    return false;
  for (int64_t i = 2; i < 5; ++i)
    if (weight.size(i) != 1) return false;
  for (const int64_t s : stride)
    if (s != 1) return false;
  for (const int64_t p : padding)
    if (p != 0) return false;
  return x.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}

at::Tensor vae_pointwise_gemm(const VaeRun& run, const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& bias) {
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4), Co = weight.size(0);
  const at::Tensor rows = x.permute({0, 2, 3, 4, 1}).view({-1, C});  // the channels-last memory as [voxels, C]
  const at::Tensor w = weight.reshape({Co, C});                      // a 1x1x1 kernel: either layout is [Co, C]
  at::Tensor y;
  {
    ProfileScope ps("conv", [&] {
      ProfileDetail d = conv_detail(x, weight, {1, 1, 1}, {0, 0, 0});
      d.key += " as GEMM";
      return d;
    });
    y = at::linear(rows, w, bias);  // an undefined bias: none
  }
  run.count("kernel.vae_pointwise_gemm.convs");
  return y.view({B, T, H, W, Co}).permute({0, 4, 1, 2, 3});  // [B, Co, T, H, W] in channels_last_3d
}

// The GEMM at the decoder's conv point, for the 1x1x1 convs without temporal context.
AUTOOPTIM_EXTENSIONS(vae_pointwise_gemm) {
  points.vae_conv.add({"vae_pointwise_gemm", 20,
                       [](const RuntimeOptions& o) { return o.of<VaePointwiseGemmOptions>().on; },
                       [](const at::Tensor& in, const ext::VaeConv& c, const VaeRun& run) -> std::optional<at::Tensor> {
                         if (c.causal || !vae_pointwise_gemm_applies(&run, in, c.weight, c.stride, c.padding))
                           return std::nullopt;
                         return vae_pointwise_gemm(run, in, c.weight, c.bias);
                       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
