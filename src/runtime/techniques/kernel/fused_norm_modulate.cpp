// Kernel technique: LayerNorm and the adaLN shift/scale modulation in one CUDA pass (fused_norm_modulate.cu).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/fused_norm_modulate_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(fused_norm_modulate) {
  Technique t;
  t.name = "fused_norm_modulate";
  t.family = "kernel";
  // Not bit-identical to libtorch's unfused kernels (rounding order; docs/journal/2026-12-03.md has the
  // set's PSNR on a clip of the random model): judged at the lossy quality floor.
  t.lossless = false;
  t.summary = "LayerNorm and the adaLN shift/scale modulation in one CUDA pass (fused_norm_modulate.cu)";
  t.flags = {bool_flag("fused_norm_modulate", field(&FusedNormModulateOptions::on),
                       "LayerNorm + adaLN shift/scale in one CUDA pass")};
  t.switch_flag = "fused_norm_modulate";
  t.hooks = {"block.norm1_modulation", "block.norm3_modulation"};
  t.engagement = {
      {"kernel.fused_norm_modulate.launches",
       "fused_norm_modulate is on but no fused norm+modulation kernel ran (needs a CUDA build and bf16 on the GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"fused_norm_modulate", {{"fused_norm_modulate", true}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/fused_block_ops.h"
#include "runtime/techniques/kernel/fused_common.h"

namespace autooptim::runtime::techniques {

bool fused_norm_modulate_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj) {
  return fc && fc->options && fc->options->of<FusedNormModulateOptions>().on && fused::gpu_bf16(x) && x.dim() == 3 &&
         x.size(2) % 2 == 0 && fused::tproj_fits(x, tproj);
}

at::Tensor fused_norm_modulate(const at::Tensor& x_in, const at::Tensor& table_in, const at::Tensor& tproj_in,
                               int k_shift, int k_scale, double eps, const ForwardContext* fc) {
  const at::Tensor x = x_in.contiguous(), tproj = tproj_in.contiguous();
  const at::Tensor table = table_in.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
#ifdef AUTOOPTIM_WITH_CUDA
  fused::check(cuda::launch_norm_modulate(x.data_ptr(), out.data_ptr(), table.data_ptr<float>(), tproj.data_ptr(),
                                          x.size(0) * x.size(1), x.size(2), fused::tp_div(x, tproj), k_shift, k_scale,
                                          static_cast<float>(eps), fused::stream()),
               "fused_norm_modulate");
#else
  throw Error("fused_norm_modulate: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_norm_modulate.launches");
  return out;
}

AUTOOPTIM_EXTENSIONS(fused_norm_modulate) {
  points.norm_modulate.add(
      {"fused_norm_modulate", 10, [](const RuntimeOptions& o) { return o.of<FusedNormModulateOptions>().on; },
       [](const at::Tensor& x, const at::Tensor& table, const at::Tensor& tproj, int k_shift, int k_scale, double eps,
          const ForwardContext* fc) -> std::optional<at::Tensor> {
         if (!fused_norm_modulate_applies(fc, x, tproj)) return std::nullopt;
         ProfileScope ps("norm_elementwise",
                         [&] { return ext::block_traffic("LayerNorm + modulation, fused", x, tproj, 2, 2); });
         return fused_norm_modulate(x, table, tproj, k_shift, k_scale, eps, fc);
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
