// Kernel technique (VAE decoder): the RMS norm over channels and the SiLU before every causal conv in one
// CUDA pass (vae_norm_silu.cu) instead of a float32 copy, a norm reduction, three float32 element-wise
// passes, a cast and a SiLU. With vae_causal_buffer the result is written straight into the conv's
// buffer.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_fused_norm_silu_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_fused_norm_silu) {
  Technique t;
  t.name = "vae_fused_norm_silu";
  t.family = "kernel";
  t.lossless = false;  // another reduction order and a fast exp: not bit-identical
  t.summary = "VAE RMS norm + SiLU in one CUDA pass (vae_norm_silu.cu), bf16 on the GPU";
  t.flags = {
      bool_flag("vae_fused_norm_silu", field(&VaeFusedNormSiluOptions::on), "VAE RMS norm + SiLU in one CUDA pass")};
  t.switch_flag = "vae_fused_norm_silu";
  t.hooks = {"vae.residual_block", "vae.decoder_out"};
  t.engagement = {
      {"kernel.vae_fused_norm_silu.launches",
       "vae_fused_norm_silu is on but no fused kernel ran (needs a CUDA build and the VAE in bf16: vae_bf16)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu
               ? std::vector<SearchPoint>{{"vae_fused_norm_silu", {{"vae_bf16", true}, {"vae_fused_norm_silu", true}}}}
               : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/fused_common.h"
#include "runtime/techniques/vae/vae_ops.h"

namespace autooptim::runtime::techniques {

bool vae_norm_silu_applies(const VaeRun* run, const at::Tensor& x) {
  return run && run->options && run->options->of<VaeFusedNormSiluOptions>().on && fused::gpu_bf16(x) && x.dim() == 5;
}

void vae_norm_silu_into(const VaeRun& run, const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& dst) {
  if (dst.sizes() != x.sizes() || dst.scalar_type() != x.scalar_type() || !dst.is_cuda())
    throw Error("vae_fused_norm_silu: the destination does not match the input");
  const int64_t C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  // [B, C, T, H*W] strides: H and W must flatten (H's stride = W * W's stride) in both tensors.
  auto strides = [&](const at::Tensor& t) {
    if (H > 1 && t.stride(3) != W * t.stride(4))
      throw Error("vae_fused_norm_silu: a frame's pixels are not one run of memory");
    return cuda::VaeStrides{t.size(0), t.stride(0), t.stride(1), t.stride(2), t.stride(4)};
  };
  // Its own category: it was in no scope, so its time showed as "other" in the decode's profile.
  ProfileScope ps("norm_elementwise", [&] {
    const bool cl = x.is_contiguous(at::MemoryFormat::ChannelsLast3d) && !x.is_contiguous();
    return ProfileDetail{"fused RMS norm + SiLU C=" + std::to_string(C) + (cl ? " cl" : ""), 0,
                         2.0 * static_cast<double>(x.numel()) * x.element_size()};
  });
  const at::Tensor g = gamma.to(at::kFloat).reshape({-1}).contiguous();
#ifdef AUTOOPTIM_WITH_CUDA
  fused::check(cuda::launch_vae_norm_silu(x.data_ptr(), dst.data_ptr(), g.data_ptr<float>(), strides(x), strides(dst),
                                          C, T, H * W, fused::stream()),
               "vae_fused_norm_silu");
#else
  (void)strides;
  (void)C;
  (void)T;
  throw Error("vae_fused_norm_silu: this build has no CUDA kernels");
#endif
  run.count("kernel.vae_fused_norm_silu.launches");
}

AUTOOPTIM_EXTENSIONS(vae_fused_norm_silu) {
  points.vae_norm_silu.add({"vae_fused_norm_silu", 10,
                            [](const RuntimeOptions& o) { return o.of<VaeFusedNormSiluOptions>().on; },
                            [](const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& dst,
                               const VaeRun& run) -> std::optional<at::Tensor> {
                              if (!vae_norm_silu_applies(&run, x)) return std::nullopt;
                              at::Tensor y = dst.defined() ? dst : at::empty_like(x);
                              vae_norm_silu_into(run, x, gamma, y);
                              return y;
                            }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
