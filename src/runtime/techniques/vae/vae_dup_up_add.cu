// The VAE up block's DupUp3D shortcut, added in place into the upsampler's output (vae_fused_shortcut):
// one read and one write of h and a gather of the small x, instead of materialising the shortcut (an
// expand copy and a permute copy of the output's size) and a third tensor for the sum.
#include <cstdint>

#include "runtime/techniques/kernel/cuda_common.cuh"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace autooptim::cuda {
namespace {

// V consecutive elements along h's unit-stride dimension per thread: channels when channels-last (cl),
// else width. With V = 8 the 16-byte loads and stores of h are aligned (checked by the launcher). I is the
// index type of the element coordinates: 32-bit where the element count allows (a 64-bit division is
// tens of instructions, and this kernel does a dozen per thread), 64-bit otherwise; the strides stay
// 64-bit.
template <int V, typename I>
__global__ void dup_up_add(__nv_bfloat16* __restrict__ h, const __nv_bfloat16* __restrict__ x, DupUpShape s, bool cl,
                           I n_vec) {
  const I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  if (i >= n_vec) return;
  const I C = static_cast<I>(s.C), T = static_cast<I>(s.T), H = static_cast<I>(s.H), W = static_cast<I>(s.W);
  const I ft = static_cast<I>(s.ft), repeats = static_cast<I>(s.repeats);
  I b, c, t, y, w, rest;
  if (cl) {  // order (b, t, y, w, c)
    const I cv = C / V;
    rest = i / cv;
    c = (i - rest * cv) * V;
    I q = rest / W;
    w = rest - q * W;
    rest = q;
    q = rest / H;
    y = rest - q * H;
    rest = q;
    b = rest / T;
    t = rest - b * T;
  } else {  // order (b, c, t, y, w)
    const I wv = W / V;
    rest = i / wv;
    w = (i - rest * wv) * V;
    I q = rest / H;
    y = rest - q * H;
    rest = q;
    q = rest / T;
    t = rest - q * T;
    rest = q;
    b = rest / C;
    c = rest - b * C;
  }
  const I tf = t + static_cast<I>(s.t_shift), ti = tf / ft, a = tf - ti * ft;
  const I p = y & 1;
  __nv_bfloat16* hp = h + static_cast<int64_t>(b) * s.hs[0] + static_cast<int64_t>(c) * s.hs[1] +
                      static_cast<int64_t>(t) * s.hs[2] + static_cast<int64_t>(y) * s.hs[3] +
                      static_cast<int64_t>(w) * s.hs[4];
  const __nv_bfloat16* xrow = x + static_cast<int64_t>(b) * s.xs[0] + static_cast<int64_t>(ti) * s.xs[2] +
                              static_cast<int64_t>(y >> 1) * s.xs[3];
  const int64_t step = cl ? s.hs[1] : s.hs[4];
  float out[V];
  if constexpr (V == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(hp);
    const __nv_bfloat162* hv = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(hv[j]);
      out[2 * j] = f.x;
      out[2 * j + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = __bfloat162float(hp[j * step]);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const I cj = cl ? c + j : c, wj = cl ? w : w + j;
    const I k = ((cj * ft + a) * 2 + p) * 2 + (wj & 1);
    const I ci = k / repeats;
    // bf16(h + x): the float sum rounded once, as the unfused add rounds it.
    out[j] = __bfloat162float(__float2bfloat16_rn(
        out[j] + __bfloat162float(xrow[static_cast<int64_t>(ci) * s.xs[1] + static_cast<int64_t>(wj >> 1) * s.xs[4]])));
  }
  if constexpr (V == 8) {
    uint4 res;
    __nv_bfloat162* r = reinterpret_cast<__nv_bfloat162*>(&res);
#pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = __floats2bfloat162_rn(out[2 * j], out[2 * j + 1]);
    *reinterpret_cast<uint4*>(hp) = res;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) hp[j * step] = __float2bfloat16_rn(out[j]);
  }
}

}  // namespace

int launch_vae_dup_up_add(void* h, const void* x, const DupUpShape& s, void* stream) {
  const int64_t n = s.B * s.C * s.T * s.H * s.W;
  if (n == 0) return 0;
  if (s.ft < 1 || s.repeats < 1) return static_cast<int>(cudaErrorInvalidValue);
  const bool cl = s.hs[1] == 1;  // channels-last: channels are the unit-stride dimension
  const int64_t inner = cl ? s.C : s.W;
  const bool unit = cl || s.hs[4] == 1;
  const bool vec = unit && inner % 8 == 0 && reinterpret_cast<uintptr_t>(h) % 16 == 0 && s.hs[0] % 8 == 0 &&
                   s.hs[2] % 8 == 0 && s.hs[3] % 8 == 0 && (cl ? s.hs[4] % 8 == 0 : s.hs[1] % 8 == 0);
  const auto st = static_cast<cudaStream_t>(stream);
  const int threads = 256;
  auto* hp = static_cast<__nv_bfloat16*>(h);
  const auto* xp = static_cast<const __nv_bfloat16*>(x);
  // 32-bit coordinates where every coordinate and the intermediate k (below C * ft * 4) fit.
  const bool narrow =
      n < (int64_t{1} << 31) && s.C * s.ft * 4 < (int64_t{1} << 31) && s.T + s.t_shift < (int64_t{1} << 31);
  if (vec) {
    const int64_t nv = n / 8;
    const auto blocks = static_cast<unsigned>((nv + threads - 1) / threads);
    if (narrow)
      dup_up_add<8, uint32_t><<<blocks, threads, 0, st>>>(hp, xp, s, cl, static_cast<uint32_t>(nv));
    else
      dup_up_add<8, int64_t><<<blocks, threads, 0, st>>>(hp, xp, s, cl, nv);
  } else {
    // One element per thread; for a channels-first h of unit width stride or a channels-last one, the
    // same orders as above.
    const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
    if (narrow)
      dup_up_add<1, uint32_t><<<blocks, threads, 0, st>>>(hp, xp, s, cl, static_cast<uint32_t>(n));
    else
      dup_up_add<1, int64_t><<<blocks, threads, 0, st>>>(hp, xp, s, cl, n);
  }
  return check_launch(cudaGetLastError());
}

}  // namespace autooptim::cuda
