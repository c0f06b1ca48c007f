// hopper_attention: dense bf16 attention for head_dim 128 on Hopper (sm_90a), written for the transformer's
// self-attention at the official shape (27,280 tokens, 24 heads), where cuDNN's kernel reaches ~540 TFLOP/s
// and takes 509 ms of the 0.906 s fused forward.
//
// One CTA computes 128 query rows of one (batch, head) against every key:
// - warpgroup 2 is the producer: one lane loads the Q tile once and the K and V tiles of N keys (128 or 176:
//   27,280 = 155 x 176, and a wider tile spreads the softmax's fixed costs) through the bulk tensor copy
//   engine (TMA) into a ring of `Stages` shared-memory stages, each completing on an mbarrier; the
//   consumers hand a stage back through an "empty" mbarrier. Its registers go to the consumers (setmaxnreg).
// - warps 0-3 and 4-7 are two consumer warpgroups of 64 query rows each. S = Q K^T and O += P V are wgmma
//   (m64nNk16 and m64n128k16, float32 accumulators); Q, K and V are read from shared memory (128-byte swizzle, as TMA
//   wrote them; V as the N-major operand), P from registers: the S accumulator's layout is the A fragment's,
//   so P is S's exponentials packed to bf16 pairs with no shuffle.
// - Within a warpgroup, the S GEMM of key tile j and the P V GEMM of tile j-1 are issued together, and the
//   softmax of tile j runs while the tensor cores still work on P V (the online softmax's rescale of O waits
//   for it). With PingPong, the two warpgroups also take turns issuing their GEMMs (named barriers 1 and 2),
//   so that one's softmax overlaps the other's GEMMs.
// Softmax in float32 with exp2 (the scale folded into log2 e); keys past the end are masked to -inf in the
// last tile; rows past the end are computed on TMA's zero fill and not stored.
//
// The tensor maps describe q, k and v as [B, H, L, 128] with any element strides that are multiples of 8
// (16 bytes), as the transformer's views of its [B, L, H*128] projections are. The output is written
// through its own strides.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace autooptim::cuda {
namespace {

constexpr int kHeadDim = 128;
constexpr int kBlockM = 128;   // query rows per CTA (two warpgroups of 64)
constexpr int kThreads = 384;  // two consumer warpgroups and the producer warpgroup
// A tile of `rows` x 128 bf16 is two TMA boxes of rows x 64 (128-byte rows, 128-byte swizzle): head_dim
// 0-63, then 64-127.
__host__ __device__ constexpr int half_bytes(int rows) { return rows * 128; }
__host__ __device__ constexpr int tile_bytes(int rows) { return rows * 256; }
constexpr int kQHalf = half_bytes(kBlockM), kQTile = tile_bytes(kBlockM);

// Shared memory: Q, Stages K tiles of N keys, Stages V tiles, then the mbarriers; plus the slack to align
// to 1024 bytes.
constexpr int smem_bytes(int n, int stages) { return kQTile + 2 * stages * tile_bytes(n) + 1024 + 256; }

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AO_HOPPER_ATTENTION_DEVICE 1
#endif

#ifdef AO_HOPPER_ATTENTION_DEVICE

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// One [128 rows x 64 columns] box of a 4D tensor map into shared memory, completing on `bar`. The map's
// dimensions are {d, L, H, B}, or {d, H, L, B} where the heads are the smaller stride (heads_inner).
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, bool heads_inner, uint32_t bar, int d,
                                         int row, int head, int batch) {
  const int c1 = heads_inner ? head : row, c2 = heads_inner ? row : head;
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(d), "r"(c1), "r"(c2), "r"(batch)
      : "memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle (mode 1 in bits 62-63), base offset 0 (every
// tile starts on a 1024-byte boundary; the k-step offsets inside a swizzle row leave bits 7-9 alone).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lead_bytes >> 4) << 16) |
         (static_cast<uint64_t>(stride_bytes >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma fence or wait.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define AO_ACC8(d, i)                                                                                         \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define AO_ACC64(d)                                                                                             \
  AO_ACC8(d, 0), AO_ACC8(d, 8), AO_ACC8(d, 16), AO_ACC8(d, 24), AO_ACC8(d, 32), AO_ACC8(d, 40), AO_ACC8(d, 48), \
      AO_ACC8(d, 56)
#define AO_D64                                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "

#define AO_ACC88(d) AO_ACC64(d), AO_ACC8(d, 64), AO_ACC8(d, 72), AO_ACC8(d, 80)
#define AO_D88                                                                                                 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, "  \
  "%65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, "  \
  "%86, %87}, "

// d[64 x N] (+)= A[64 x 16] (K-major in shared memory) * B[16 x N] (K-major in shared memory), N = 128 or 176.
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %66, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " AO_D64 "%64, %65, p, 1, 1, 0, 0;\n\t}"
      : AO_ACC64(d)
      : "l"(a), "l"(b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_ss(float (&d)[88], uint64_t a, uint64_t b, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %90, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 " AO_D88 "%88, %89, p, 1, 1, 0, 0;\n\t}"
      : AO_ACC88(d)
      : "l"(a), "l"(b), "r"(accumulate));
}

// d[64 x 128] (+)= A[64 x 16] (bf16 pairs in registers) * B[16 x 128] (N-major in shared memory).
__device__ __forceinline__ void wgmma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t b,
                                         int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " AO_D64 "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n\t}"
      : AO_ACC64(d)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(accumulate));
}

// S = Q K^T over head_dim 128: eight k16 steps, four in each 64-column box. q is this warpgroup's 64 rows;
// k a tile of N keys.
template <int N>
__device__ __forceinline__ void gemm_qk(float (&s)[N / 2], uint32_t q, uint32_t k) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t in_row = (kk % 4) * 32;
    wgmma_ss(s, smem_desc(q + (kk / 4) * kQHalf + in_row, 16, 1024),
             smem_desc(k + (kk / 4) * half_bytes(N) + in_row, 16, 1024), kk > 0);
  }
}

// O (+)= P V over N keys: N / 16 k16 steps of 16 keys (16 rows x 128 bytes = 2048 bytes each). V is the
// N-major operand: the next 64 head_dim columns are the second box (leading offset), the next 8 keys are
// 1024 bytes on (stride offset).
template <int N>
__device__ __forceinline__ void gemm_pv(float (&o)[64], const uint32_t (&p)[N / 4], uint32_t v, bool accumulate) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
    wgmma_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], smem_desc(v + kk * 2048, half_bytes(N), 1024),
             accumulate || kk > 0);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// The online softmax of one tile: s holds raw scores of rows g (s[4i], s[4i+1]) and g+8 (s[4i+2], s[4i+3]),
// columns 8i + 2c + {0, 1}. Replaces them with exp2(s * scale_log2 - m_new); returns the correction factors
// exp2(m_old - m_new) and adds the tile's partial row sums into l after scaling l.
template <int N>
__device__ __forceinline__ void softmax_tile(float (&s)[N / 2], float (&m)[2], float (&l)[2], float (&corr)[2],
                                             int valid_cols, int c, float scale_log2) {
  if (valid_cols < N) {
#pragma unroll
    for (int i = 0; i < N / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * i + 2 * c + e >= valid_cols) s[4 * i + e] = s[4 * i + 2 + e] = -INFINITY;
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    mx[0] = fmaxf(mx[0], fmaxf(s[4 * i], s[4 * i + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(m[r], mx[r] * scale_log2);
    corr[r] = fast_exp2(m[r] - m_new);  // m[r] = -inf on the first tile: 0
    m[r] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < N / 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s[4 * i + e] = fast_exp2(fmaf(s[4 * i + e], scale_log2, -m[0]));
      s[4 * i + 2 + e] = fast_exp2(fmaf(s[4 * i + 2 + e], scale_log2, -m[1]));
      sum[0] += s[4 * i + e];
      sum[1] += s[4 * i + 2 + e];
    }
  l[0] = l[0] * corr[0] + sum[0];
  l[1] = l[1] * corr[1] + sum[1];
}

#endif  // AO_HOPPER_ATTENTION_DEVICE

struct OutStrides {
  int64_t batch, head, row;
};
struct MapOrder {
  bool q, k, v;  // heads_inner of each tensor map
};

template <int N, int Stages, bool PingPong>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_attention_kernel(const __grid_constant__ CUtensorMap qmap, const __grid_constant__ CUtensorMap kmap,
                            const __grid_constant__ CUtensorMap vmap, MapOrder order, __nv_bfloat16* __restrict__ out,
                            OutStrides os, int Lq, int Lk, float scale_log2) {
#ifdef AO_HOPPER_ATTENTION_DEVICE
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  constexpr int kKvHalf = half_bytes(N), kKvTile = tile_bytes(N);
  const uint32_t q_tile = base;
  auto k_tile = [&](int s) { return base + kQTile + kKvTile * s; };
  auto v_tile = [&](int s) { return base + kQTile + kKvTile * (Stages + s); };
  const uint32_t bars = base + kQTile + kKvTile * 2 * Stages;
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8 * (1 + s); };
  auto v_full = [&](int s) { return bars + 8 * (1 + Stages + s); };
  auto k_empty = [&](int s) { return bars + 8 * (1 + 2 * Stages + s); };
  auto v_empty = [&](int s) { return bars + 8 * (1 + 3 * Stages + s); };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kBlockM, head = blockIdx.y, batch = blockIdx.z;
  const int n_tiles = (Lk + N - 1) / N;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < Stages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), 8);  // lane 0 of each consumer warp
      mbar_init(v_empty(s), 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp >= 8) {  // producer warpgroup: one lane issues every copy; its registers go to the consumers
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (warp == 8 && lane == 0) {
      mbar_expect_tx(q_full, kQTile);
      tma_load(q_tile, &qmap, order.q, q_full, 0, q0, head, batch);
      tma_load(q_tile + kQHalf, &qmap, order.q, q_full, 64, q0, head, batch);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % Stages;
        const uint32_t free_parity = ((j / Stages) & 1) ^ 1;  // a fresh barrier passes parity 1 at once
        mbar_wait(k_empty(s), free_parity);
        mbar_expect_tx(k_full(s), kKvTile);
        tma_load(k_tile(s), &kmap, order.k, k_full(s), 0, j * N, head, batch);
        tma_load(k_tile(s) + kKvHalf, &kmap, order.k, k_full(s), 64, j * N, head, batch);
        mbar_wait(v_empty(s), free_parity);
        mbar_expect_tx(v_full(s), kKvTile);
        tma_load(v_tile(s), &vmap, order.v, v_full(s), 0, j * N, head, batch);
        tma_load(v_tile(s) + kKvHalf, &vmap, order.v, v_full(s), 64, j * N, head, batch);
      }
    }
    return;
  }

  // Consumers: 240 registers each (the three warpgroups start at 168; 24 + 2 x 240 per quadrant fits).
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  const int wg = warp / 4, g = lane / 4, c = lane % 4;
  const uint32_t q_rows = q_tile + wg * (64 * 128);  // this warpgroup's 64 rows in each box
  float s_acc[N / 2], o_acc[64];
  uint32_t p[N / 4];
#pragma unroll
  for (int i = 0; i < 64; ++i) o_acc[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2];
  // PingPong: warpgroup w issues its GEMMs after named barrier 1 + w; the other warpgroup arrives on it.
  // Each warpgroup issues n_tiles + 1 times; warpgroup 1 opens the first turn and skips its last arrive,
  // so that every barrier sees as many arrivals as waits.
  auto turn_begin = [&] {
    if constexpr (PingPong) named_sync(1 + wg);
  };
  auto turn_end = [&](bool last) {
    if constexpr (PingPong) {
      if (!(last && wg == 1)) named_arrive(2 - wg);
    }
  };
  if constexpr (PingPong) {
    if (wg == 1) named_arrive(1);
  }
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbar_arrive(bar);
  };

  mbar_wait(q_full, 0);
  // Tile 0: S only.
  mbar_wait(k_full(0), 0);
  turn_begin();
  reg_fence(s_acc);
  wg_fence();
  gemm_qk<N>(s_acc, q_rows, k_tile(0));
  wg_commit();
  turn_end(false);
  wg_wait<0>();
  reg_fence(s_acc);
  release(k_empty(0));
  softmax_tile<N>(s_acc, m, l, corr, Lk, c, scale_log2);
#pragma unroll
  for (int t = 0; t < N / 4; ++t) p[t] = pack_bf16(s_acc[2 * t], s_acc[2 * t + 1]);

  for (int j = 1; j < n_tiles; ++j) {
    const int s = j % Stages, sp = (j - 1) % Stages;
    mbar_wait(k_full(s), (j / Stages) & 1);
    mbar_wait(v_full(sp), ((j - 1) / Stages) & 1);
    turn_begin();
    reg_fence(s_acc);
    reg_fence(o_acc);
    reg_fence(p);
    wg_fence();
    gemm_qk<N>(s_acc, q_rows, k_tile(s));
    wg_commit();
    gemm_pv<N>(o_acc, p, v_tile(sp), j > 1);
    wg_commit();
    turn_end(false);
    wg_wait<1>();  // S of tile j is in; P V of tile j-1 may still run
    reg_fence(s_acc);
    release(k_empty(s));
    softmax_tile<N>(s_acc, m, l, corr, Lk - j * N, c, scale_log2);
    wg_wait<0>();
    reg_fence(o_acc);
    reg_fence(p);
    release(v_empty(sp));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      o_acc[4 * i] *= corr[0];
      o_acc[4 * i + 1] *= corr[0];
      o_acc[4 * i + 2] *= corr[1];
      o_acc[4 * i + 3] *= corr[1];
    }
#pragma unroll
    for (int t = 0; t < N / 4; ++t) p[t] = pack_bf16(s_acc[2 * t], s_acc[2 * t + 1]);
  }
  {
    const int sp = (n_tiles - 1) % Stages;
    mbar_wait(v_full(sp), ((n_tiles - 1) / Stages) & 1);
    turn_begin();
    reg_fence(o_acc);
    reg_fence(p);
    wg_fence();
    gemm_pv<N>(o_acc, p, v_tile(sp), n_tiles > 1);
    wg_commit();
    turn_end(true);
    wg_wait<0>();
    reg_fence(o_acc);
    release(v_empty(sp));
  }

  // Normalise and store: rows g and g+8 of this warp's 16, columns 8i + 2c + {0, 1}.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int row0 = q0 + wg * 64 + (warp % 4) * 16 + g;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row >= Lq) continue;
    const float inv = 1.f / l[r];
    __nv_bfloat16* dst = out + batch * os.batch + head * os.head + static_cast<int64_t>(row) * os.row + 2 * c;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<__nv_bfloat162*>(dst + 8 * i) =
          __floats2bfloat162_rn(o_acc[4 * i + 2 * r] * inv, o_acc[4 * i + 2 * r + 1] * inv);
  }
#else
  // Built for another architecture: the launcher never starts this kernel there.
  __trap();
#endif
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A map of [B, H, L, 128] bf16 with boxes of 64 columns x box_rows rows, 128-byte swizzle, zero fill past the ends. The
// two middle dimensions go in the order of their strides (the heads first when theirs is smaller), which puts the same
// [128 rows][64] box in shared memory either way. Size-1 dimensions get a harmless stride.
bool make_map(CUtensorMap* map, bool* heads_inner, const void* ptr, AttentionOperand t, int64_t B, int64_t H, int64_t L,
              uint32_t box_rows) {
  if (H == 1) t.head = kHeadDim;
  if (L == 1) t.row = kHeadDim;
  if (B == 1) t.batch = t.row * L + t.head * H;
  *heads_inner = t.head < t.row;
  const cuuint64_t n_row = static_cast<cuuint64_t>(L), n_head = static_cast<cuuint64_t>(H);
  const cuuint64_t s_row = static_cast<cuuint64_t>(t.row) * 2, s_head = static_cast<cuuint64_t>(t.head) * 2;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(kHeadDim), *heads_inner ? n_head : n_row,
                              *heads_inner ? n_row : n_head, static_cast<cuuint64_t>(B)};
  const cuuint64_t strides[3] = {*heads_inner ? s_head : s_row, *heads_inner ? s_row : s_head,
                                 static_cast<cuuint64_t>(t.batch) * 2};
  const cuuint32_t box[4] = {64, *heads_inner ? 1u : box_rows, *heads_inner ? box_rows : 1u, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode_fn()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(ptr), dims, strides, box, elem,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int N, int Stages, bool PingPong>
int launch_variant(const void* q, const void* k, const void* v, const AttentionOperand& qs, const AttentionOperand& ks,
                   const AttentionOperand& vs, void* out, OutStrides os, int64_t B, int64_t H, int64_t Lq, int64_t Lk,
                   float scale_log2, cudaStream_t stream) {
  CUtensorMap qm, km, vm;
  MapOrder order{};
  if (!make_map(&qm, &order.q, q, qs, B, H, Lq, kBlockM) || !make_map(&km, &order.k, k, ks, B, H, Lk, N) ||
      !make_map(&vm, &order.v, v, vs, B, H, Lk, N))
    return cudaErrorInvalidValue;
  auto kernel = hopper_attention_kernel<N, Stages, PingPong>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(N, Stages));
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((Lq + kBlockM - 1) / kBlockM), static_cast<unsigned>(H),
                  static_cast<unsigned>(B));
  kernel<<<grid, kThreads, smem_bytes(N, Stages), stream>>>(qm, km, vm, order, static_cast<__nv_bfloat16*>(out), os,
                                                            static_cast<int>(Lq), static_cast<int>(Lk), scale_log2);
  return cudaGetLastError();
}

bool aligned(const AttentionOperand& t) { return t.row % 8 == 0 && t.head % 8 == 0 && t.batch % 8 == 0; }

}  // namespace

bool hopper_attention_supported(int device) {
  // Asked on every attention call: the answer is kept per device (0 unknown, 1 yes, -1 no).
  static std::atomic<signed char> known[64] = {};
  if (device < 0 || device >= 64) return false;
  if (const signed char k = known[device].load(std::memory_order_relaxed)) return k > 0;
  int major = 0, minor = 0;
  const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                  major == 9 && minor == 0 && encode_fn() != nullptr;  // sm_90a code runs on 9.0 only
  known[device].store(ok ? 1 : -1, std::memory_order_relaxed);
  return ok;
}

int launch_hopper_attention(const void* q, const void* k, const void* v, void* out, const AttentionOperand& qs,
                            const AttentionOperand& ks, const AttentionOperand& vs, const AttentionOperand& os,
                            int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t head_dim, float scale, int variant,
                            void* stream) {
  const auto addr_ok = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (head_dim != kHeadDim || B < 1 || H < 1 || Lq < 1 || Lk < 1 || B > 65535 || H > 65535 || Lq > (1ll << 30) ||
      Lk > (1ll << 30) || !addr_ok(q) || !addr_ok(k) || !addr_ok(v) || !aligned(qs) || !aligned(ks) || !aligned(vs) ||
      os.row % 2 != 0 || reinterpret_cast<uintptr_t>(out) % 4 != 0 || encode_fn() == nullptr)
    return cudaErrorInvalidValue;
  const OutStrides o{os.batch, os.head, os.row};
  const float scale_log2 = scale * 1.4426950408889634f;
  const auto st = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case 0:
      return launch_variant<128, 2, false>(q, k, v, qs, ks, vs, out, o, B, H, Lq, Lk, scale_log2, st);
    case 1:
      return launch_variant<128, 2, true>(q, k, v, qs, ks, vs, out, o, B, H, Lq, Lk, scale_log2, st);
    case 2:
      return launch_variant<128, 3, false>(q, k, v, qs, ks, vs, out, o, B, H, Lq, Lk, scale_log2, st);
    case 3:
      return launch_variant<128, 3, true>(q, k, v, qs, ks, vs, out, o, B, H, Lq, Lk, scale_log2, st);
    case 4:
      return launch_variant<176, 2, false>(q, k, v, qs, ks, vs, out, o, B, H, Lq, Lk, scale_log2, st);
    case 5:
      return launch_variant<176, 2, true>(q, k, v, qs, ks, vs, out, o, B, H, Lq, Lk, scale_log2, st);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace autooptim::cuda
