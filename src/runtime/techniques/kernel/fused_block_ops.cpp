#include "runtime/techniques/kernel/fused_block_ops.h"

#include "runtime/error.h"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

#ifdef AUTOOPTIM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace autooptim::runtime::techniques {
namespace {

#ifdef AUTOOPTIM_WITH_CUDA
constexpr bool kCudaBuild = true;
void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }
#else
constexpr bool kCudaBuild = false;
void* stream() { return nullptr; }
#endif

bool gpu_bf16(const at::Tensor& t) { return kCudaBuild && t.is_cuda() && t.scalar_type() == at::kBFloat16; }

void check(int rc, const char* what) {
  if (rc != 0) throw Error(std::string(what) + ": CUDA launch failed (error " + std::to_string(rc) + ")");
}

// Rows per time-projection row: 1 when per token ([B, L, 6, D]), L when per sample ([B, 6, D]).
int64_t tp_div(const at::Tensor& x, const at::Tensor& tproj) { return tproj.dim() == 4 ? 1 : x.size(1); }

bool tproj_fits(const at::Tensor& x, const at::Tensor& tproj) {
  const int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  if (!gpu_bf16(tproj) || tproj.size(-1) != D || tproj.size(-2) != 6 || tproj.size(0) != B) return false;
  return tproj.dim() == 3 || (tproj.dim() == 4 && tproj.size(1) == L);
}

}  // namespace

bool fused_norm_modulate_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj) {
  return fc && fc->options && fc->options->fused_norm_modulate && gpu_bf16(x) && x.dim() == 3 && x.size(2) % 2 == 0 &&
         tproj_fits(x, tproj);
}

at::Tensor fused_norm_modulate(const at::Tensor& x_in, const at::Tensor& table_in, const at::Tensor& tproj_in,
                               int k_shift, int k_scale, double eps, const ForwardContext* fc) {
  const at::Tensor x = x_in.contiguous(), tproj = tproj_in.contiguous();
  const at::Tensor table = table_in.to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(x);
#ifdef AUTOOPTIM_WITH_CUDA
  check(cuda::launch_norm_modulate(x.data_ptr(), out.data_ptr(), table.data_ptr<float>(), tproj.data_ptr(),
                                   x.size(0) * x.size(1), x.size(2), tp_div(x, tproj), k_shift, k_scale,
                                   static_cast<float>(eps), stream()),
        "fused_norm_modulate");
#else
  throw Error("fused_norm_modulate: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_norm_modulate.launches");
  return out;
}

bool fused_gate_residual_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj) {
  return fc && fc->options && fc->options->fused_gate_residual && gpu_bf16(x) && x.dim() == 3 &&
         x.size(2) % 2 == 0 && tproj_fits(x, tproj);
}

at::Tensor fused_gate_residual(const at::Tensor& x_in, const at::Tensor& y_in, const at::Tensor& table_in,
                               const at::Tensor& tproj_in, int k_gate, const ForwardContext* fc) {
  const at::Tensor x = x_in.contiguous(), y = y_in.to(at::kBFloat16).contiguous(), tproj = tproj_in.contiguous();
  const at::Tensor table = table_in.to(at::kFloat).contiguous();
  if (y.sizes() != x.sizes()) throw Error("fused_gate_residual: branch output shape differs from the residual");
  at::Tensor out = at::empty_like(x);
#ifdef AUTOOPTIM_WITH_CUDA
  check(cuda::launch_gate_residual(x.data_ptr(), y.data_ptr(), out.data_ptr(), table.data_ptr<float>(),
                                   tproj.data_ptr(), x.size(0) * x.size(1), x.size(2), tp_div(x, tproj), k_gate,
                                   stream()),
        "fused_gate_residual");
#else
  throw Error("fused_gate_residual: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_gate_residual.launches");
  return out;
}

bool fused_qk_norm_rope_applies(const ForwardContext* fc, const at::Tensor& q, const at::Tensor& k) {
  if (!(fc && fc->options && fc->options->fused_qk_norm_rope && gpu_bf16(q) && gpu_bf16(k))) return false;
  if (q.dim() != 3 || k.sizes() != q.sizes() || q.stride(2) != 1 || k.stride(2) != 1) return false;
  // Rows r = b * L + l at r * stride: [B, L, D] with strides (L * s, s, 1), s the same for q and k.
  return q.stride(1) == k.stride(1) && q.stride(0) == q.size(1) * q.stride(1) &&
         k.stride(0) == k.size(1) * k.stride(1) && q.stride(1) % 2 == 0 && q.size(2) % 2 == 0;
}

void fused_qk_norm_rope(at::Tensor& q, at::Tensor& k, const RMSNorm& norm_q, const RMSNorm& norm_k,
                        const at::Tensor& cos_in, const at::Tensor& sin_in, int64_t head_dim, const ForwardContext* fc) {
  const at::Tensor wq = norm_q->weight.to(at::kBFloat16).contiguous(), wk = norm_k->weight.to(at::kBFloat16).contiguous();
  const at::Tensor cos = cos_in.to(at::kFloat).contiguous(), sin = sin_in.to(at::kFloat).contiguous();
  const int64_t L = q.size(1);
  if (cos.size(0) != L || cos.size(1) * 2 != head_dim) throw Error("fused_qk_norm_rope: rotary table shape mismatch");
  if (norm_q->eps != norm_k->eps) throw Error("fused_qk_norm_rope: q and k norms have different eps");
#ifdef AUTOOPTIM_WITH_CUDA
  check(cuda::launch_qk_norm_rope(q.data_ptr(), k.data_ptr(), q.stride(1), wq.data_ptr(), wk.data_ptr(),
                                  cos.data_ptr<float>(), sin.data_ptr<float>(), q.size(0) * L, L, q.size(2), head_dim,
                                  static_cast<float>(norm_q->eps), stream()),
        "fused_qk_norm_rope");
#else
  throw Error("fused_qk_norm_rope: this build has no CUDA kernels");
#endif
  fc->count("kernel.fused_qk_norm_rope.launches");
}

bool gelu_epilogue_applies(const ForwardContext* fc, const at::Tensor& x) {
  return fc && fc->options && fc->options->gelu_epilogue && gpu_bf16(x);
}

at::Tensor gelu_epilogue_linear(const Linear& lin, const at::Tensor& x, const ForwardContext* fc) {
  const int64_t K = x.size(-1);
  const at::Tensor x2 = x.reshape({-1, K});
  if (!lin->bias.defined()) throw Error("gelu_epilogue: the FFN projection has no bias");
  // beta = alpha = 1 with a 1-D bias: libtorch routes this to cuBLASLt's GELU_BIAS epilogue (tanh GELU).
  at::Tensor y = at::_addmm_activation(lin->bias, x2, lin->weight.t(), 1, 1, /*use_gelu=*/true);
  fc->count("kernel.gelu_epilogue.launches");
  auto shape = x.sizes().vec();
  shape.back() = lin->weight.size(0);
  return y.view(shape);
}

}  // namespace autooptim::runtime::techniques
