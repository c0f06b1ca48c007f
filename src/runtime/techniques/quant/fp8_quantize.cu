// Row-wise FP8 (e4m3) quantisation of bf16 activations for the fp8_linears switch: one block per row
// finds max |x| and writes x / scale as e4m3 with scale = max / 448 (the format's largest finite value).
// With gelu the row is first passed through gelu_tanh (rounded to bf16, as the unfused FFN does), so
// the FFN's activation and the quantisation of its second GEMM's input are one pass.
#include <cuda_fp8.h>

#include "runtime/techniques/kernel/cuda_common.cuh"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace autooptim::cuda {
namespace {

__device__ __forceinline__ float gelu_tanh_bf16(float v) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const float g = 0.5f * v * (1.f + tanhf(k0 * (v + k1 * v * v * v)));
  return __bfloat162float(__float2bfloat16_rn(g));
}

template <bool kGelu>
__device__ __forceinline__ float2 load2(const __nv_bfloat162* p, int64_t i) {
  float2 v = __bfloat1622float2(p[i]);
  if (kGelu) v = make_float2(gelu_tanh_bf16(v.x), gelu_tanh_bf16(v.y));
  return v;
}

// One block per row, pairs of elements (cols and the row stride are even).
template <bool kGelu>
__global__ void quantize_rows_kernel(const __nv_bfloat162* __restrict__ x, int64_t x_stride_half,
                                     __nv_fp8x2_e4m3* __restrict__ out, float* __restrict__ scale, int64_t half,
                                     float min_scale) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const __nv_bfloat162* xr = x + r * x_stride_half;
  float m = 0.f;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 v = load2<kGelu>(xr, i);
    m = fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y)));
  }
  const float s = fmaxf(block_max(m, scratch) / 448.f, min_scale);
  if (threadIdx.x == 0) scale[r] = s;
  const float inv = 1.f / s;
  __nv_fp8x2_e4m3* o = out + r * half;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 v = load2<kGelu>(xr, i);
    o[i] = __nv_fp8x2_e4m3(make_float2(v.x * inv, v.y * inv));
  }
}

}  // namespace

int launch_quantize_rows_e4m3(const void* x, int64_t x_stride, void* out, float* scale, int64_t rows, int64_t cols,
                              bool gelu, float min_scale, void* stream) {
  if (rows == 0) return 0;
  if (cols % 2 || x_stride % 2) return static_cast<int>(cudaErrorInvalidValue);
  auto s = static_cast<cudaStream_t>(stream);
  const auto* xi = static_cast<const __nv_bfloat162*>(x);
  auto* o = static_cast<__nv_fp8x2_e4m3*>(out);
  const unsigned threads = cols >= 8192 ? 512 : 256;
  if (gelu)
    quantize_rows_kernel<true>
        <<<static_cast<unsigned>(rows), threads, 0, s>>>(xi, x_stride / 2, o, scale, cols / 2, min_scale);
  else
    quantize_rows_kernel<false>
        <<<static_cast<unsigned>(rows), threads, 0, s>>>(xi, x_stride / 2, o, scale, cols / 2, min_scale);
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
