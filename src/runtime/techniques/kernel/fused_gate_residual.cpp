// Kernel technique: the gate multiply and the residual add in one CUDA pass (fused_gate_residual.cu).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/fused_gate_residual_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(fused_gate_residual) {
  Technique t;
  t.name = "fused_gate_residual";
  t.family = "kernel";
  // Not bit-identical to libtorch's unfused kernels (rounding order; docs/journal/2026-12-03.md has the
  // set's PSNR on a clip of the random model): judged at the lossy quality floor.
  t.lossless = false;
  t.summary = "the gate multiply and the residual add in one CUDA pass (fused_gate_residual.cu)";
  t.flags = {bool_flag("fused_gate_residual", field(&FusedGateResidualOptions::on),
                       "gate multiply + residual add in one CUDA pass")};
  t.switch_flag = "fused_gate_residual";
  t.hooks = {"block.attention_residual", "block.ffn_residual"};
  t.engagement = {
      {"kernel.fused_gate_residual.launches",
       "fused_gate_residual is on but no fused gate+residual kernel ran (needs a CUDA build and bf16 on the GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"fused_gate_residual", {{"fused_gate_residual", true}}}}
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

bool fused_gate_residual_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj) {
  return fc && fc->options && fc->options->of<FusedGateResidualOptions>().on && fused::gpu_bf16(x) && x.dim() == 3 &&
         x.size(2) % 2 == 0 && fused::tproj_fits(x, tproj);
}

at::Tensor fused_gate_residual(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& table_in,
                               const at::Tensor& tproj_in, int k_gate, const ForwardContext* fc) {
  const at::Tensor x = x_in.contiguous(), y = y_in.to(at::kBFloat16).contiguous(), tproj = tproj_in.contiguous();
  const at::Tensor table = table_in.to(at::kFloat).contiguous();
  if (y.sizes() != x.sizes()) throw Error("fused_gate_residual: branch output shape differs from the residual");
  at::Tensor out = at::empty_like(x);
#ifdef AUTOOPTIM_WITH_CUDA
  fused::check(
      cuda::launch_gate_residual(x.data_ptr(), y.data_ptr(), out.data_ptr(), table.data_ptr<float>(), tproj.data_ptr(),
                                 x.size(0) * x.size(1), x.size(2), fused::tp_div(x, tproj), k_gate, fused::stream()),
      "fused_gate_residual");
#else
  throw Error("fused_gate_residual: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_gate_residual.launches");
  return out;
}

AUTOOPTIM_EXTENSIONS(fused_gate_residual) {
  points.gate_residual.add(
      {"fused_gate_residual", 10, [](const RuntimeOptions& o) { return o.of<FusedGateResidualOptions>().on; },
       [](const at::Tensor& res, const at::Tensor& branch, const at::Tensor& table, const at::Tensor& tproj, int k_gate,
          const ForwardContext* fc) -> std::optional<at::Tensor> {
         if (!fused_gate_residual_applies(fc, res, tproj)) return std::nullopt;
         ProfileScope ps("norm_elementwise",
                         [&] { return ext::block_traffic("gate + residual, fused", res, tproj, 3, 1); });
         return fused_gate_residual(res, branch, table, tproj, k_gate, fc);
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
