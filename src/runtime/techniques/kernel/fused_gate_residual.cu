// Fused gate-multiply + residual add: out = bf16(float(x) + float(y) * (table + tproj)[gate]) in one pass,
// instead of a float32 copy of x, a float32 product, a float32 sum and a cast. Rounded as the unfused
// float32 ops round (no fused multiply-add), so the result is bit-identical to them.
#include "runtime/techniques/kernel/cuda_common.cuh"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace autooptim::cuda {
namespace {

// One block per row, pairs of elements (dim is even).
__global__ void gate_residual_kernel(const __nv_bfloat162* x, const __nv_bfloat162* __restrict__ y, __nv_bfloat162* out,
                                     const float2* __restrict__ table, const __nv_bfloat162* __restrict__ tproj,
                                     int64_t half, int64_t tp_div, int k_gate) {
  const int64_t r = blockIdx.x;
  const __nv_bfloat162* tp = tproj + ((r / tp_div) * 6 + k_gate) * half;
  const float2* tg = table + k_gate * half;
  const __nv_bfloat162* xr = x + r * half;
  const __nv_bfloat162* yr = y + r * half;
  __nv_bfloat162* o = out + r * half;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 t = tg[i];
    const float2 p = __bfloat1622float2(tp[i]);
    const float2 a = __bfloat1622float2(xr[i]);
    const float2 b = __bfloat1622float2(yr[i]);
    const float lo = __fadd_rn(a.x, __fmul_rn(b.x, __fadd_rn(t.x, p.x)));
    const float hi = __fadd_rn(a.y, __fmul_rn(b.y, __fadd_rn(t.y, p.y)));
    o[i] = __floats2bfloat162_rn(lo, hi);
  }
}

}  // namespace

int launch_gate_residual(const void* x, const void* y, void* out, const float* table, const void* tproj, int64_t rows,
                         int64_t dim, int64_t tp_div, int k_gate, void* stream) {
  if (rows == 0) return 0;
  if (dim % 2) return static_cast<int>(cudaErrorInvalidValue);
  gate_residual_kernel<<<static_cast<unsigned>(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat162*>(x), static_cast<const __nv_bfloat162*>(y), static_cast<__nv_bfloat162*>(out),
      reinterpret_cast<const float2*>(table), static_cast<const __nv_bfloat162*>(tproj), dim / 2, tp_div, k_gate);
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
