// Kernel technique: the block's cross-attention norms in single CUDA passes (fused_cross_norm.cu): norm2,
// the LayerNorm with affine in front of the cross-attention (the reference makes a float32 copy of the
// activations, normalises into another and casts back), and the cross-attention's residual add fused
// with the FFN's LayerNorm + modulation after it. The profile put ~55 ms of the fused forward in
// element-wise work at the official shape, of which these were the largest unfused part.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/fused_cross_norm_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(fused_cross_norm) {
  Technique t;
  t.name = "fused_cross_norm";
  t.family = "kernel";
  // The residual add is rounded as at::add rounds it, but the statistics are summed in another order
  // than libtorch's LayerNorm: judged at the lossy quality floor, as the other fused norms.
  t.lossless = false;
  t.summary =
      "norm2 (LayerNorm + affine) and the cross-attention's residual add + the FFN's LayerNorm + modulation, each one "
      "CUDA pass";
  t.flags = {bool_flag("fused_cross_norm", field(&FusedCrossNormOptions::on),
                       "the cross-attention's norms and residual add in single CUDA passes")};
  t.switch_flag = "fused_cross_norm";
  t.hooks = {"block.norm2", "block.cross_residual_norm3_modulation"};
  t.engagement = {
      {"kernel.fused_cross_norm.launches",
       "fused_cross_norm is on but no fused cross-attention norm ran (needs a CUDA build and bf16 on the GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"fused_cross_norm", {{"fused_cross_norm", true}}}}
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

bool fused_cross_norm_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj) {
  return fc && fc->options && fc->options->of<FusedCrossNormOptions>().on && fused::gpu_bf16(x) && x.dim() == 3 &&
         x.size(2) % 2 == 0 && (!tproj.defined() || fused::tproj_fits(x, tproj));
}

at::Tensor fused_layer_norm_affine(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias, double eps,
                                   const ForwardContext* fc) {
  const at::Tensor x = x_in.contiguous();
  const at::Tensor w = weight.to(at::kFloat).contiguous(), b = bias.to(at::kFloat).contiguous();
  if (w.numel() != x.size(2) || b.numel() != x.size(2))
    throw Error("fused_cross_norm: the LayerNorm's weight or bias does not match the width");
  at::Tensor out = at::empty_like(x);
#ifdef AUTOOPTIM_WITH_CUDA
  fused::check(
      cuda::launch_layer_norm_affine(x.data_ptr(), out.data_ptr(), w.data_ptr<float>(), b.data_ptr<float>(),
                                     x.size(0) * x.size(1), x.size(2), static_cast<float>(eps), fused::stream()),
      "fused_cross_norm");
#else
  (void)eps;
  throw Error("fused_cross_norm: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_cross_norm.launches");
  return out;
}

std::pair<at::Tensor, at::Tensor> fused_add_norm_modulate(const at::Tensor& x_in, const at::Tensor& y_in,
                                                          const at::Tensor& table_in, const at::Tensor& tproj_in,
                                                          int k_shift, int k_scale, double eps,
                                                          const ForwardContext* fc) {
  const at::Tensor x = x_in.contiguous(), y = y_in.to(x.scalar_type()).contiguous(), tproj = tproj_in.contiguous();
  if (y.sizes() != x.sizes()) throw Error("fused_cross_norm: the residual branch does not match the activations");
  const at::Tensor table = table_in.to(at::kFloat).contiguous();
  at::Tensor sum = at::empty_like(x), out = at::empty_like(x);
#ifdef AUTOOPTIM_WITH_CUDA
  fused::check(cuda::launch_add_norm_modulate(x.data_ptr(), y.data_ptr(), sum.data_ptr(), out.data_ptr(),
                                              table.data_ptr<float>(), tproj.data_ptr(), x.size(0) * x.size(1),
                                              x.size(2), fused::tp_div(x, tproj), k_shift, k_scale,
                                              static_cast<float>(eps), fused::stream()),
               "fused_cross_norm");
#else
  (void)k_shift;
  (void)k_scale;
  (void)eps;
  throw Error("fused_cross_norm: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_cross_norm.launches");
  return {sum, out};
}

AUTOOPTIM_EXTENSIONS(fused_cross_norm) {
  const auto on = [](const RuntimeOptions& o) { return o.of<FusedCrossNormOptions>().on; };
  points.affine_norm.add(
      {"fused_cross_norm", 10, on,
       [](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
          const ForwardContext* fc) -> std::optional<at::Tensor> {
         if (!fused_cross_norm_applies(fc, x)) return std::nullopt;
         ProfileScope ps("norm_elementwise", [&] {
           return ProfileDetail{"norm2 LayerNorm + affine, fused", 0, 2.0 * x.numel() * x.element_size()};
         });
         return fused_layer_norm_affine(x, weight, bias, eps, fc);
       }});
  points.residual_norm_modulate.add(
      {"fused_cross_norm", 10, on,
       [](const at::Tensor& x, const at::Tensor& y, const at::Tensor& table, const at::Tensor& tproj, int k_shift,
          int k_scale, double eps, const ForwardContext* fc) -> std::optional<std::pair<at::Tensor, at::Tensor>> {
         if (!fused_cross_norm_applies(fc, x, tproj)) return std::nullopt;
         ProfileScope ps("norm_elementwise", [&] {
           return ext::block_traffic("cross residual + LayerNorm + modulation, fused", x, tproj, 4, 2);
         });
         return fused_add_norm_modulate(x, y, table, tproj, k_shift, k_scale, eps, fc);
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
