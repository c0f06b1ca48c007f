// q/k RMSNorm (over all heads' lanes, float32 statistics, bf16 gain) and rotary embedding in one pass, in
// place: replaces rms_norm (a read and a write), then, per tensor, a float32 copy, a complex product and a
// cast back (three more passes and two float32 tensors of the activations' size). The normalised value is
// rounded to bf16 before the rotation, as in the unfused path.
#include "runtime/techniques/kernel/cuda_common.cuh"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace autooptim::cuda {
namespace {

// grid (rows, 2): blockIdx.y selects q or k. Each thread handles (even, odd) pairs.
__global__ void qk_norm_rope_kernel(__nv_bfloat162* q, __nv_bfloat162* k, int64_t stride_half,
                                    const __nv_bfloat162* __restrict__ wq, const __nv_bfloat162* __restrict__ wk,
                                    const float* __restrict__ cos, const float* __restrict__ sin, int64_t tokens,
                                    int64_t half, int64_t pairs_per_head, float eps) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  __nv_bfloat162* x = (blockIdx.y == 0 ? q : k) + r * stride_half;
  const __nv_bfloat162* w = blockIdx.y == 0 ? wq : wk;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 a = __bfloat1622float2(x[i]);
    s += a.x * a.x + a.y * a.y;
  }
  const float rstd = rsqrtf(block_sum(s, scratch) / static_cast<float>(2 * half) + eps);
  const int64_t t = r % tokens;
  const float* c = cos + t * pairs_per_head;
  const float* sn = sin + t * pairs_per_head;
  // j = i % pairs_per_head, kept by adding the stride's remainder: a 64-bit modulo per pair was most of
  // this loop's instructions (the profile measured the kernel at ~37% of the copy bandwidth).
  const int64_t j_step = blockDim.x % pairs_per_head;
  int64_t j = threadIdx.x % pairs_per_head;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 a = __bfloat1622float2(x[i]);
    const float2 g = __bfloat1622float2(w[i]);
    // RMSNorm as the fused op computes it: (x * rstd) * weight in float32, rounded to bf16.
    const float re = __bfloat162float(__float2bfloat16_rn(__fmul_rn(__fmul_rn(a.x, rstd), g.x)));
    const float im = __bfloat162float(__float2bfloat16_rn(__fmul_rn(__fmul_rn(a.y, rstd), g.y)));
    const float cj = c[j], sj = sn[j];
    // (re + i im)(c + i s) = (re c - im s) + i (re s + im c)
    x[i] = __floats2bfloat162_rn(__fsub_rn(__fmul_rn(re, cj), __fmul_rn(im, sj)),
                                 __fadd_rn(__fmul_rn(re, sj), __fmul_rn(im, cj)));
    j += j_step;
    if (j >= pairs_per_head) j -= pairs_per_head;
  }
}

}  // namespace

int launch_qk_norm_rope(void* q, void* k, int64_t stride, const void* wq, const void* wk, const float* cos,
                        const float* sin, int64_t rows, int64_t tokens, int64_t dim, int64_t head_dim, float eps,
                        void* stream) {
  if (rows == 0) return 0;
  if (dim % 2 || head_dim % 2 || stride % 2 || dim % head_dim) return static_cast<int>(cudaErrorInvalidValue);
  qk_norm_rope_kernel<<<dim3(static_cast<unsigned>(rows), 2), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<__nv_bfloat162*>(q), static_cast<__nv_bfloat162*>(k), stride / 2,
      static_cast<const __nv_bfloat162*>(wq), static_cast<const __nv_bfloat162*>(wk), cos, sin, tokens, dim / 2,
      head_dim / 2, eps);
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
