// Fused LayerNorm (no affine, float32 statistics) + adaLN modulation, one pass over the row's output:
// replaces layer_norm_fp32(x) * (1 + (table + tproj)[scale]) + (table + tproj)[shift], which materialises
// the float32 modulation table ([L, 6, D] per token: 2 GB at the official shape) and four float32 copies
// of the activations per block. The products and sums are rounded as the unfused float32 ops round them;
// the statistics are two-pass (mean, then centred variance) over the row, which stays in L1/L2.
#include "runtime/techniques/kernel/fused_kernels_cuda.h"
#include "runtime/techniques/kernel/fused_rows.cuh"

namespace autooptim::cuda {
namespace {

// One block per row, pairs of elements (dim is even).
__global__ void norm_modulate_kernel(const __nv_bfloat162* __restrict__ x, __nv_bfloat162* __restrict__ out,
                                     const float2* __restrict__ table, const __nv_bfloat162* __restrict__ tproj,
                                     int64_t half, int64_t tp_div, int k_shift, int k_scale, float eps) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float n_inv = 1.f / static_cast<float>(2 * half);
  const __nv_bfloat162* xr = x + r * half;
  const float mean = row_sum(xr, half, scratch) * n_inv;
  const float rstd = row_rstd(xr, half, mean, n_inv, eps, scratch);
  write_modulated_row(xr, out + r * half, mean, rstd, table, tproj, r, half, tp_div, k_shift, k_scale);
}

}  // namespace

int launch_norm_modulate(const void* x, void* out, const float* table, const void* tproj, int64_t rows, int64_t dim,
                         int64_t tp_div, int k_shift, int k_scale, float eps, void* stream) {
  if (rows == 0) return 0;
  if (dim % 2) return static_cast<int>(cudaErrorInvalidValue);
  norm_modulate_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(x), static_cast<__nv_bfloat162*>(out), reinterpret_cast<const float2*>(table),
      static_cast<const __nv_bfloat162*>(tproj), dim / 2, tp_div, k_shift, k_scale, eps);
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
