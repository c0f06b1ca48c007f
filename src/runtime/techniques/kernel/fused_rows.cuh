#pragma once
// What the fused LayerNorm kernels share (fused_norm_modulate.cu, fused_cross_norm.cu): a block per row of
// `half` bf16 pairs with its threads striding over the row, two-pass float32 statistics (mean, then the
// centred variance; the row stays in L1/L2), and the adaLN modulation rounded as the unfused float32 ops
// round it. GPU builds only.
#include "runtime/techniques/kernel/cuda_common.cuh"

namespace autooptim::cuda {

// The sum of the row's elements; every thread of the block gets it.
// (No __restrict__ here: a caller may read back a row it wrote, which must not take the read-only path.)
__device__ __forceinline__ float row_sum(const __nv_bfloat162* xr, int64_t half, float* scratch) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 a = __bfloat1622float2(xr[i]);
    s += a.x + a.y;
  }
  return block_sum(s, scratch);
}

// 1 / sqrt(variance + eps) of the row around its mean (n_inv = 1 / elements).
__device__ __forceinline__ float row_rstd(const __nv_bfloat162* xr, int64_t half, float mean, float n_inv, float eps,
                                          float* scratch) {
  float v = 0.f;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 a = __bfloat1622float2(xr[i]);
    const float dx = a.x - mean, dy = a.y - mean;
    v += dx * dx + dy * dy;
  }
  return rsqrtf(block_sum(v, scratch) * n_inv + eps);
}

// bf16(LN(a) * (1 + (ts + ps)) + (tb + pb)) for a pair: table (float32) and time projection (bf16) parts
// of the scale and the shift, each product and sum rounded as the unfused float32 ops round it.
__device__ __forceinline__ __nv_bfloat162 modulate_pair(float2 a, float mean, float rstd, float2 ts, float2 tb,
                                                        float2 ps, float2 pb) {
  const float lo =
      __fadd_rn(__fmul_rn(__fmul_rn(a.x - mean, rstd), __fadd_rn(1.f, __fadd_rn(ts.x, ps.x))), __fadd_rn(tb.x, pb.x));
  const float hi =
      __fadd_rn(__fmul_rn(__fmul_rn(a.y - mean, rstd), __fadd_rn(1.f, __fadd_rn(ts.y, ps.y))), __fadd_rn(tb.y, pb.y));
  return __floats2bfloat162_rn(lo, hi);
}

// Row r's output of the LayerNorm + adaLN modulation: o[i] = modulate_pair(xr[i]) with the modulation
// rows k_scale and k_shift of the table (float32 [6, D]) and of the time projection (bf16, row r / tp_div).
__device__ __forceinline__ void write_modulated_row(const __nv_bfloat162* xr, __nv_bfloat162* o, float mean, float rstd,
                                                    const float2* __restrict__ table,
                                                    const __nv_bfloat162* __restrict__ tproj, int64_t r, int64_t half,
                                                    int64_t tp_div, int k_shift, int k_scale) {
  const __nv_bfloat162* tp = tproj + (r / tp_div) * 6 * half;
  const float2* t_shift = table + k_shift * half;
  const float2* t_scale = table + k_scale * half;
  const __nv_bfloat162* p_shift = tp + k_shift * half;
  const __nv_bfloat162* p_scale = tp + k_scale * half;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x)
    o[i] = modulate_pair(__bfloat1622float2(xr[i]), mean, rstd, t_scale[i], t_shift[i], __bfloat1622float2(p_scale[i]),
                         __bfloat1622float2(p_shift[i]));
}

}  // namespace autooptim::cuda
