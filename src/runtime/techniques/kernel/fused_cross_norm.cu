// The block's cross-attention norms in single passes (fused_cross_norm.cpp):
// - norm2, the LayerNorm with affine in front of the cross-attention, on bf16 activations with float32
//   weight and bias: the reference converts the activations to a float32 copy, normalises into another
//   float32 tensor and casts back (three passes writing 1.7 GB a block at the official shape);
// - the cross-attention's residual add and the FFN's LayerNorm + modulation after it: the sum is written
//   once (rounded to bf16, as at::add rounds it) and normalised in the same pass over the row.
// Statistics in float32, two-pass (mean, then centred variance) over the row, which stays in L1/L2.
#include "runtime/techniques/kernel/fused_kernels_cuda.h"
#include "runtime/techniques/kernel/fused_rows.cuh"

namespace autooptim::cuda {
namespace {

// One block per row, pairs of elements (dim is even).
__global__ void layer_norm_affine_kernel(const __nv_bfloat162* __restrict__ x, __nv_bfloat162* __restrict__ out,
                                         const float2* __restrict__ w, const float2* __restrict__ b, int64_t half,
                                         float eps) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float n_inv = 1.f / static_cast<float>(2 * half);
  const __nv_bfloat162* xr = x + r * half;
  const float mean = row_sum(xr, half, scratch) * n_inv;
  const float rstd = row_rstd(xr, half, mean, n_inv, eps, scratch);
  __nv_bfloat162* o = out + r * half;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 a = __bfloat1622float2(xr[i]);
    const float2 g = w[i], c = b[i];
    o[i] = __floats2bfloat162_rn(__fadd_rn(__fmul_rn(__fmul_rn(a.x - mean, rstd), g.x), c.x),
                                 __fadd_rn(__fmul_rn(__fmul_rn(a.y - mean, rstd), g.y), c.y));
  }
}

// sum = bf16(x + y); out = bf16(LN(sum) * (1 + mod(k_scale)) + mod(k_shift)), as launch_norm_modulate
// computes it from sum; the first pass writes the sum and adds it up. Each thread reads back only the
// elements it wrote.
__global__ void add_norm_modulate_kernel(const __nv_bfloat162* __restrict__ x, const __nv_bfloat162* __restrict__ y,
                                         __nv_bfloat162* __restrict__ sum, __nv_bfloat162* __restrict__ out,
                                         const float2* __restrict__ table, const __nv_bfloat162* __restrict__ tproj,
                                         int64_t half, int64_t tp_div, int k_shift, int k_scale, float eps) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float n_inv = 1.f / static_cast<float>(2 * half);
  const __nv_bfloat162* xr = x + r * half;
  const __nv_bfloat162* yr = y + r * half;
  __nv_bfloat162* sr = sum + r * half;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 a = __bfloat1622float2(xr[i]), c = __bfloat1622float2(yr[i]);
    const __nv_bfloat162 t = __floats2bfloat162_rn(__fadd_rn(a.x, c.x), __fadd_rn(a.y, c.y));
    sr[i] = t;
    const float2 tf = __bfloat1622float2(t);
    s += tf.x + tf.y;
  }
  const float mean = block_sum(s, scratch) * n_inv;
  const float rstd = row_rstd(sr, half, mean, n_inv, eps, scratch);
  write_modulated_row(sr, out + r * half, mean, rstd, table, tproj, r, half, tp_div, k_shift, k_scale);
}

}  // namespace

int launch_layer_norm_affine(const void* x, void* out, const float* weight, const float* bias, int64_t rows,
                             int64_t dim, float eps, void* stream) {
  if (rows == 0) return 0;
  if (dim % 2) return static_cast<int>(cudaErrorInvalidValue);
  layer_norm_affine_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(x), static_cast<__nv_bfloat162*>(out), reinterpret_cast<const float2*>(weight),
      reinterpret_cast<const float2*>(bias), dim / 2, eps);
  return check_launch(cudaGetLastError());
}

int launch_add_norm_modulate(const void* x, const void* y, void* sum, void* out, const float* table, const void* tproj,
                             int64_t rows, int64_t dim, int64_t tp_div, int k_shift, int k_scale, float eps,
                             void* stream) {
  if (rows == 0) return 0;
  if (dim % 2) return static_cast<int>(cudaErrorInvalidValue);
  add_norm_modulate_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(x), static_cast<const __nv_bfloat162*>(y), static_cast<__nv_bfloat162*>(sum),
      static_cast<__nv_bfloat162*>(out), reinterpret_cast<const float2*>(table),
      static_cast<const __nv_bfloat162*>(tproj), dim / 2, tp_div, k_shift, k_scale, eps);
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
