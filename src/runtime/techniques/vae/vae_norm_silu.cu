// The VAE's RMS norm and SiLU in one pass: out = silu(bf16(x / max(||x||_C, 1e-12) * sqrt(C) * gamma)), the
// norm over channels in float32, rounded to bf16 before the SiLU as the unfused ops round. Input and
// output are addressed by strides (batch, channel, frame, voxel within a frame), so that the output can
// be a frame range of a causal conv's padded input buffer: no concatenation copy afterwards.
#include <algorithm>
#include <cstdint>

#include "runtime/techniques/kernel/cuda_common.cuh"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace autooptim::cuda {
namespace {

// y rounded to bf16 (to nearest, ties to even) and back, as __float2bfloat16_rn rounds, but in integer
// ALU operations: the conversion unit does a quarter of the FP32 rate, and this kernel converts every
// element three times. A NaN stays a NaN (the carry could otherwise turn its payload into another value).
__device__ __forceinline__ float round_to_bf16(float y) {
  const uint32_t u = __float_as_uint(y);
  const float r = __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
  return y != y ? y : r;
}

// SiLU of the norm's output as the unfused ops see it (a bf16 tensor). The sigmoid's division is the
// approximate one (a reciprocal and a multiply, 2 ulp in float32; the result is rounded to bf16): the
// profile measured this kernel at ~40% of the copy bandwidth, bound by its per-element arithmetic, not
// by its loads (keeping the voxel in registers, half the reads, changed nothing). For r < -87 the
// exponential overflows and the result is 0, where float32 division gives a denormal of ~1e-36.
__device__ __forceinline__ float silu_bf16(float y) {
  const float r = round_to_bf16(y);
  return __fdividef(r, 1.f + __expf(-r));
}

// The channels-last kernels' 8 channels of one 16-byte load: their squares added to ss in order, and
// their outputs given the voxel's scale inv and each channel's gain gain(k), k < 8.
__device__ __forceinline__ void add_squares8(const uint4& raw, float& ss) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    ss = fmaf(f.x, f.x, ss);
    ss = fmaf(f.y, f.y, ss);
  }
}

template <typename Gain>
__device__ __forceinline__ uint4 norm_silu8(const uint4& raw, float inv, Gain gain) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  uint4 res;
  __nv_bfloat162* r = reinterpret_cast<__nv_bfloat162*>(&res);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    r[j] = __floats2bfloat162_rn(silu_bf16(f.x * inv * gain(2 * j)), silu_bf16(f.y * inv * gain(2 * j + 1)));
  }
  return res;
}

// Channels first (the voxel stride is 1): a block is 64 neighbouring voxels of one frame x 4 channel
// groups; each thread sums every 4th channel of its voxel (loads of a warp: 32 neighbouring voxels of one
// channel, coalesced; eight in flight per thread), the groups' sums meet in shared memory, and the second
// pass writes the same channels. Offsets within a frame are 32-bit.
constexpr int kCfVoxels = 64, kCfGroups = 4;

__global__ void norm_silu_cf(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out,
                             const float* __restrict__ gamma, VaeStrides xs, VaeStrides os, int64_t C, int64_t T,
                             int64_t HW, float scale) {
  __shared__ float part[kCfGroups][kCfVoxels];
  const int lane = threadIdx.x % kCfVoxels, g = threadIdx.x / kCfVoxels;
  const int64_t blocks_per_frame = (HW + kCfVoxels - 1) / kCfVoxels;
  const int64_t frame = blockIdx.x / blocks_per_frame;  // b * T + t
  const int64_t v = (blockIdx.x % blocks_per_frame) * kCfVoxels + lane;
  const int64_t b = frame / T, t = frame % T;
  const bool live = v < HW;
  const __nv_bfloat16* xp = x + b * xs.b + t * xs.t + (live ? v : 0) * xs.v;
  __nv_bfloat16* op = out + b * os.b + t * os.t + (live ? v : 0) * os.v;
  const int xc = static_cast<int>(xs.c), oc = static_cast<int>(os.c), nc = static_cast<int>(C);
  float ss = 0.f;
  if (live) {
#pragma unroll 8
    for (int c = g; c < nc; c += kCfGroups) {
      const float f = __bfloat162float(xp[static_cast<int64_t>(c) * xc]);
      ss = fmaf(f, f, ss);
    }
  }
  part[g][lane] = ss;
  __syncthreads();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < kCfGroups; ++i) tot += part[i][lane];
  if (!live) return;
  const float inv = scale / fmaxf(sqrtf(tot), 1e-12f);
#pragma unroll 8
  for (int c = g; c < nc; c += kCfGroups) {
    const float f = __bfloat162float(xp[static_cast<int64_t>(c) * xc]);
    op[static_cast<int64_t>(c) * oc] = __float2bfloat16_rn(silu_bf16(f * inv * gamma[c]));
  }
}

// Channels last (the channel stride is 1): one warp per voxel, eight channels per lane per load.
__global__ void norm_silu_cl(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out,
                             const float* __restrict__ gamma, VaeStrides xs, VaeStrides os, int64_t C, int64_t T,
                             int64_t HW, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t n = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t per_b = T * HW;
  const int64_t b = n / per_b, rem = n % per_b, t = rem / HW, v = rem % HW;
  if (b >= xs.batches) return;
  const __nv_bfloat16* xp = x + b * xs.b + t * xs.t + v * xs.v;
  __nv_bfloat16* op = out + b * os.b + t * os.t + v * os.v;
  const int64_t C8 = C / 8;
  float ss = 0.f;
  for (int64_t i = lane; i < C8; i += 32) add_squares8(reinterpret_cast<const uint4*>(xp)[i], ss);
  ss = warp_sum(ss);
  const float inv = scale / fmaxf(sqrtf(ss), 1e-12f);
  for (int64_t i = lane; i < C8; i += 32) {
    const float* gi = gamma + i * 8;
    reinterpret_cast<uint4*>(op)[i] =
        norm_silu8(reinterpret_cast<const uint4*>(xp)[i], inv, [gi](int k) { return gi[k]; });
  }
}

// Channels last with C = 256 V (the decoder's 256-, 512- and 1024-channel stages): a warp per voxel, lane
// l holding channels [8 (l + 32 u), +8) for u < V, the same channels and summation order as norm_silu_cl
// (so the same bits), but the voxel stays in registers between the two passes (one read, not two), the
// gains are loaded once per warp, a warp loads P voxels before reducing any (more loads in flight where
// a voxel is only 512 bytes), and warps stride over the voxels (a grid of the resident blocks) with
// 32-bit index arithmetic. The profile measured norm_silu_cl at ~40% of the copy bandwidth in the
// official-shape decode (207 ms).
template <int V, int P>
__global__ void norm_silu_cl_regs(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out,
                                  const float* __restrict__ gamma, VaeStrides xs, VaeStrides os, uint32_t T,
                                  uint32_t HW, uint32_t voxels, float scale) {
  const int lane = threadIdx.x & 31;
  const uint32_t warps = (gridDim.x * blockDim.x) >> 5;
  const uint32_t per_b = T * HW;
  float g[V][8];
#pragma unroll
  for (int u = 0; u < V; ++u) {
    const float4 a = reinterpret_cast<const float4*>(gamma)[(lane + 32 * u) * 2];
    const float4 b = reinterpret_cast<const float4*>(gamma)[(lane + 32 * u) * 2 + 1];
    g[u][0] = a.x, g[u][1] = a.y, g[u][2] = a.z, g[u][3] = a.w;
    g[u][4] = b.x, g[u][5] = b.y, g[u][6] = b.z, g[u][7] = b.w;
  }
  const uint32_t groups = (voxels + P - 1) / P;
  for (uint32_t grp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; grp < groups; grp += warps) {
    uint4 raw[P][V];
    int64_t out_off[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const uint32_t n = grp * P + p;
      out_off[p] = -1;
      if (n >= voxels) continue;
      const uint32_t b = n / per_b, rem = n - b * per_b, t = rem / HW, v = rem - t * HW;
      const uint4* xp = reinterpret_cast<const uint4*>(x + b * xs.b + t * xs.t + v * xs.v);
      out_off[p] = b * os.b + t * os.t + v * os.v;
#pragma unroll
      for (int u = 0; u < V; ++u) raw[p][u] = xp[lane + 32 * u];
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (out_off[p] < 0) continue;  // the same for the whole warp: no divergence around the shuffles
      float ss = 0.f;
#pragma unroll
      for (int u = 0; u < V; ++u) add_squares8(raw[p][u], ss);
      ss = warp_sum(ss);
      const float inv = scale / fmaxf(sqrtf(ss), 1e-12f);
      uint4* op = reinterpret_cast<uint4*>(out + out_off[p]);
#pragma unroll
      for (int u = 0; u < V; ++u) op[lane + 32 * u] = norm_silu8(raw[p][u], inv, [&g, u](int k) { return g[u][k]; });
    }
  }
}

// Launches norm_silu_cl_regs<V, P> on as many blocks as the device holds at once (its occupancy), fewer
// where the voxels need fewer. The resident-block count is asked once per kernel (the decode launches
// this hundreds of times a chunk; the process uses one device).
template <int V, int P>
int launch_regs(const __nv_bfloat16* x, __nv_bfloat16* out, const float* gamma, VaeStrides xs, VaeStrides os, int64_t T,
                int64_t HW, int64_t voxels, float scale, cudaStream_t s) {
  constexpr int threads = 256;
  static const int64_t resident = [] {
    int device = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, norm_silu_cl_regs<V, P>, threads, 0) != cudaSuccess)
      return int64_t{0};
    return static_cast<int64_t>(sms) * std::max(per_sm, 1);
  }();
  // The query failed: an error, never a silent success with nothing written.
  if (resident == 0) return static_cast<int>(cudaErrorInvalidDevice);
  const int64_t groups = (voxels + P - 1) / P;
  const int64_t needed = (groups * 32 + threads - 1) / threads;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(needed, resident));
  norm_silu_cl_regs<V, P><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
      x, out, gamma, xs, os, static_cast<uint32_t>(T), static_cast<uint32_t>(HW), static_cast<uint32_t>(voxels), scale);
  return check_launch(cudaGetLastError());
}

}  // namespace

int launch_vae_norm_silu(const void* x, void* out, const float* gamma, VaeStrides xs, VaeStrides os, int64_t C,
                         int64_t T, int64_t HW, void* stream) {
  const int64_t voxels = xs.batches * T * HW;
  if (voxels == 0) return 0;
  const float scale = sqrtf(static_cast<float>(C));
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* xp = static_cast<const __nv_bfloat16*>(x);
  auto* op = static_cast<__nv_bfloat16*>(out);
  const bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) && (reinterpret_cast<uintptr_t>(out) % 16 == 0);
  if (xs.c == 1 && os.c == 1 && C % 8 == 0 && aligned && xs.v % 8 == 0 && os.v % 8 == 0 && xs.t % 8 == 0 &&
      os.t % 8 == 0 && xs.b % 8 == 0 && os.b % 8 == 0) {
    // The register kernel where C is 256, 512 or 1024, the voxel count fits 32 bits and the gains are
    // 16-byte aligned; the general one otherwise.
    const bool regs = voxels < (int64_t{1} << 31) && reinterpret_cast<uintptr_t>(gamma) % 16 == 0;
    if (regs && C == 256) return launch_regs<1, 4>(xp, op, gamma, xs, os, T, HW, voxels, scale, s);
    if (regs && C == 512) return launch_regs<2, 2>(xp, op, gamma, xs, os, T, HW, voxels, scale, s);
    if (regs && C == 1024) return launch_regs<4, 1>(xp, op, gamma, xs, os, T, HW, voxels, scale, s);
    const int threads = 256;
    const int64_t blocks = (voxels * 32 + threads - 1) / threads;
    norm_silu_cl<<<static_cast<unsigned>(blocks), threads, 0, s>>>(xp, op, gamma, xs, os, C, T, HW, scale);
  } else {
    if (xs.c > INT32_MAX || os.c > INT32_MAX || C > INT32_MAX) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t blocks = xs.batches * T * ((HW + kCfVoxels - 1) / kCfVoxels);
    norm_silu_cf<<<static_cast<unsigned>(blocks), kCfVoxels * kCfGroups, 0, s>>>(xp, op, gamma, xs, os, C, T, HW,
                                                                                 scale);
  }
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
