#pragma once
// Kernel techniques that fuse the transformer block's memory-bound operations (GPU builds; each is off by
// default and counts its engagement):
//   fused_norm_modulate: LayerNorm + adaLN shift/scale in one pass (fused_norm_modulate.cu);
//   fused_gate_residual: gate multiply + residual add in one pass (fused_gate_residual.cu);
//   fused_qk_norm_rope:  q/k RMSNorm + rotary embedding in one in-place pass (fused_qk_norm_rope.cu);
//   gelu_epilogue:       the FFN's GELU-tanh in the first GEMM's cuBLASLt epilogue;
//   fused_cross_norm:    norm2 (LayerNorm + affine) in one pass, and the cross-attention's residual add
//                        with the FFN's LayerNorm + modulation in one pass (fused_cross_norm.cu).
// Each `*_applies` says whether the fused path can run on these tensors (switch on, a CUDA build, bf16 on
// the GPU, even widths); otherwise the caller runs its reference composite, which is also what the CPU
// build runs, so the switch is then not engaged and the engagement check says so.
#include <ATen/ATen.h>

#include <utility>

#include "runtime/forward_context.h"
#include "runtime/nn.h"

namespace autooptim::runtime::techniques {

bool fused_norm_modulate_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj);
// bf16(LN(x) * (1 + (table + tproj)[k_scale]) + (table + tproj)[k_shift]); x [B, L, D], table float32
// [1, 6, D], tproj [B, 6, D] or [B, L, 6, D]. Counts kernel.fused_norm_modulate.launches.
at::Tensor fused_norm_modulate(const at::Tensor& x, const at::Tensor& table, const at::Tensor& tproj, int k_shift,
                               int k_scale, double eps, const ForwardContext* fc);

bool fused_gate_residual_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj);
// bf16(float(x) + float(y) * (table + tproj)[k_gate]). Counts kernel.fused_gate_residual.launches.
at::Tensor fused_gate_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& table,
                               const at::Tensor& tproj, int k_gate, const ForwardContext* fc);

bool fused_qk_norm_rope_applies(const ForwardContext* fc, const at::Tensor& q, const at::Tensor& k);
// In place on q, k [B, L, D] (rows may be strided, e.g. slices of a fused QKV output): RMSNorm with the
// gains, then rotation by cos/sin [L, head_dim / 2]. Counts kernel.fused_qk_norm_rope.launches.
void fused_qk_norm_rope(at::Tensor& q, at::Tensor& k, const RMSNorm& norm_q, const RMSNorm& norm_k,
                        const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim, const ForwardContext* fc);

// With tproj: also whether the time projection fits x (for fused_add_norm_modulate).
bool fused_cross_norm_applies(const ForwardContext* fc, const at::Tensor& x, const at::Tensor& tproj = {});
// bf16(LN(x) * weight + bias) for the block's norm2 (weight and bias float32 [D]). Counts
// kernel.fused_cross_norm.launches.
at::Tensor fused_layer_norm_affine(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                                   const ForwardContext* fc);
// {x + y, fused_norm_modulate(x + y, ...)} in one pass (the sum rounded to bf16 as at::add rounds it).
// Counts kernel.fused_cross_norm.launches.
std::pair<at::Tensor, at::Tensor> fused_add_norm_modulate(const at::Tensor& x, const at::Tensor& y,
                                                          const at::Tensor& table, const at::Tensor& tproj, int k_shift,
                                                          int k_scale, double eps, const ForwardContext* fc);

bool gelu_epilogue_applies(const ForwardContext* fc, const at::Tensor& x);
// gelu_tanh(lin(x)) as one cuBLASLt GEMM with a GELU-bias epilogue. Counts kernel.gelu_epilogue.launches.
at::Tensor gelu_epilogue_linear(const Linear& lin, const at::Tensor& x, const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
