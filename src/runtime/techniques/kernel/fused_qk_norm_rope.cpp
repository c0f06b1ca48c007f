// Kernel technique: q/k RMSNorm and the rotary embedding in one in-place CUDA pass (fused_qk_norm_rope.cu).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/fused_qk_norm_rope_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(fused_qk_norm_rope) {
  Technique t;
  t.name = "fused_qk_norm_rope";
  t.family = "kernel";
  // Not bit-identical to libtorch's unfused kernels (rounding order; docs/journal/2026-12-03.md has the
  // set's PSNR on a clip of the random model): judged at the lossy quality floor.
  t.lossless = false;
  t.summary = "q/k RMSNorm and the rotary embedding in one in-place CUDA pass (fused_qk_norm_rope.cu)";
  t.flags = {bool_flag("fused_qk_norm_rope", field(&FusedQkNormRopeOptions::on),
                       "q/k RMSNorm + RoPE in one in-place CUDA pass")};
  t.switch_flag = "fused_qk_norm_rope";
  t.hooks = {"self_attention.qk_norm_rope"};
  t.engagement = {
      {"kernel.fused_qk_norm_rope.launches",
       "fused_qk_norm_rope is on but no fused q/k norm+RoPE kernel ran (needs a CUDA build and bf16 on the GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"fused_qk_norm_rope", {{"fused_qk_norm_rope", true}}}}
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

bool fused_qk_norm_rope_applies(const ForwardContext* fc, const at::Tensor& q, const at::Tensor& k) {
  if (!(fc && fc->options && fc->options->of<FusedQkNormRopeOptions>().on && fused::gpu_bf16(q) && fused::gpu_bf16(k)))
    return false;
  if (q.dim() != 3 || k.sizes() != q.sizes() || q.stride(2) != 1 || k.stride(2) != 1) return false;
  // Rows r = b * L + l at r * stride: [B, L, D] with strides (L * s, s, 1), s the same for q and k.
  return q.stride(1) == k.stride(1) && q.stride(0) == q.size(1) * q.stride(1) &&
         k.stride(0) == k.size(1) * k.stride(1) && q.stride(1) % 2 == 0 && q.size(2) % 2 == 0;
}

void fused_qk_norm_rope(at::Tensor& q, at::Tensor& k, const RMSNorm& norm_q, const RMSNorm& norm_k,
                        const at::Tensor& cos_in, const at::Tensor& sin_in, int64_t head_dim,
                        const ForwardContext* fc) {
  const at::Tensor wq = norm_q->weight.to(at::kBFloat16).contiguous(),
                   wk = norm_k->weight.to(at::kBFloat16).contiguous();
  const at::Tensor cos = cos_in.to(at::kFloat).contiguous(), sin = sin_in.to(at::kFloat).contiguous();
  const int64_t L = q.size(1);
  if (cos.size(0) != L || cos.size(1) * 2 != head_dim) throw Error("fused_qk_norm_rope: rotary table shape mismatch");
  if (norm_q->eps != norm_k->eps) throw Error("fused_qk_norm_rope: q and k norms have different eps");
#ifdef AUTOOPTIM_WITH_CUDA
  fused::check(cuda::launch_qk_norm_rope(q.data_ptr(), k.data_ptr(), q.stride(1), wq.data_ptr(), wk.data_ptr(),
                                         cos.data_ptr<float>(), sin.data_ptr<float>(), q.size(0) * L, L, q.size(2),
                                         head_dim, static_cast<float>(norm_q->eps), fused::stream()),
               "fused_qk_norm_rope");
#else
  throw Error("fused_qk_norm_rope: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_qk_norm_rope.launches");
}

AUTOOPTIM_EXTENSIONS(fused_qk_norm_rope) {
  points.qk_norm_rope.add(
      {"fused_qk_norm_rope", 10, [](const RuntimeOptions& o) { return o.of<FusedQkNormRopeOptions>().on; },
       [](at::Tensor& q, at::Tensor& k, const RMSNorm& norm_q, const RMSNorm& norm_k, const at::Tensor& cos,
          const at::Tensor& sin, int64_t head_dim, const ForwardContext* fc) -> std::optional<ext::Done> {
         if (!fused_qk_norm_rope_applies(fc, q, k)) return std::nullopt;
         ProfileScope ps("rope");
         fused_qk_norm_rope(q, k, norm_q, norm_k, cos, sin, head_dim, fc);
         return ext::Done{};
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
