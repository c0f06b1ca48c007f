// Kernel technique: the q, k and v projections of self-attention as one GEMM over merged weights.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(fused_qkv) {
  Technique t;
  t.name = "fused_qkv";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "self-attention's q/k/v projections as one GEMM over weights merged on first use";
  t.flags = always_written({bool_flag("fused_qkv", field(&FusedQkvOptions::on), "q/k/v weights merged into one GEMM")});
  t.switch_flag = "fused_qkv";
  t.hooks = {"self_attention.qkv_projection"};
  t.engagement = {{"kernel.fused_qkv.launches", "fused_qkv is on but no fused QKV projection ran"}};
  t.search = [](const SearchContext&) { return std::vector<SearchPoint>{{"fused_qkv", {{"fused_qkv", true}}}}; };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/fused_qkv.h"
#include "runtime/techniques/kernel/gemm_autotune.h"

namespace autooptim::runtime::techniques {

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_qkv(const at::Tensor& x, const Linear& q, const Linear& k,
                                                         const Linear& v, FusedQKVWeights& merged,
                                                         const ForwardContext* fc) {
  // Re-merge when the weights were reloaded (a new storage) since the last merge.
  if (!merged.weight.defined() || merged.weight.device() != q->weight.device() ||
      merged.weight.scalar_type() != q->weight.scalar_type()) {
    at::NoGradGuard g;
    merged.weight = at::cat({q->weight, k->weight, v->weight}, 0).contiguous();
    merged.bias = at::cat({q->bias, k->bias, v->bias}, 0).contiguous();
  }
  const at::Tensor xx = x.to(merged.weight.scalar_type());
  at::Tensor qkv = tuned_linear(xx, merged.weight, merged.bias, /*gelu=*/false, fc);  // with gemm_autotune
  if (!qkv.defined()) qkv = at::linear(xx, merged.weight, merged.bias);               // [B, L, 3D]
  auto parts = qkv.chunk(3, -1);
  if (fc) fc->count("kernel.fused_qkv.launches");
  return {parts[0], parts[1], parts[2]};
}

// The merged GEMM at the self-attention's q/k/v-projection point, first of its overrides.
AUTOOPTIM_EXTENSIONS(fused_qkv) {
  points.qkv.add(
      {"fused_qkv", 20, [](const RuntimeOptions& o) { return o.of<FusedQkvOptions>().on; },
       [](const ext::QkvWeights& w, const at::Tensor& x, const ForwardContext* fc) -> std::optional<ext::Qkv> {
         ProfileScope ps("gemm", [&] { return gemm_detail(x, 3 * w.q->weight.size(0)); });
         auto [q, k, v] = fused_qkv(x, w.q, w.k, w.v, w.state.get<FusedQKVWeights>("fused_qkv"), fc);  // [B, L, 3D]
         return ext::Qkv{q, k, v};
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
