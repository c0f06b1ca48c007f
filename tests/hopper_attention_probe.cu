// hopper_attention_probe: the sm_90a attention kernel (src/runtime/techniques/kernel/hopper_attention.cu)
// alone, without libtorch, for iterating on the kernel on a leased GPU: it builds with nvcc in well under a
// minute (scripts/gpu/hopper-probe.sh) where the project's GPU build takes minutes.
//
// For every variant: small and odd shapes in three operand layouts against a float64 reference on the
// host, with the error split where a wrong kernel shows it (the two consumer warpgroups' rows, the two
// 64-column halves of head_dim, the last key tile, rows past a tile), two diagnostic inputs that test one
// GEMM each (q = 0: the output is V's mean row, the P V GEMM alone; V = I: the output is P, the Q K^T GEMM
// and the softmax alone), then the official shape (27,280 tokens, 24 heads, the fused QKV rows) timed, with
// sampled rows checked. A kernel that does not finish within 10 s is reported as hung and the probe exits
// 3 (a barrier deadlock cannot eat the lease). Exit 1 when any check fails, 0 when all pass.
//   hopper_attention_probe [--variants 1,2,...] [--skip-official] [--official-only]
// Variants are numbered as the switch numbers them (1-6).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/techniques/kernel/fused_kernels_cuda.h"

namespace {

using autooptim::cuda::AttentionOperand;

#define PROBE_CHECK(call)                                                                      \
  do {                                                                                         \
    const cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "hopper_attention_probe: %s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kD = 128;

enum class Layout { head_major, token_major, fused_qkv };
const char* name(Layout l) {
  return l == Layout::head_major ? "[B,H,L,d]" : l == Layout::token_major ? "[B,L,H,d]" : "fused QKV [B,L,3,H,d]";
}
enum class Fill { random, q_zero, v_identity };
const char* name(Fill f) { return f == Fill::random ? "random" : f == Fill::q_zero ? "q=0" : "V=I"; }

struct Case {
  int64_t B, H, Lq, Lk;
  Layout layout;
  Fill fill;
};

// Host copies of q, k, v as float (the bf16 values), [B, H, L, d] each.
struct HostQkv {
  std::vector<float> q, k, v;
};

float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

HostQkv make_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  HostQkv h;
  h.q.resize(c.B * c.H * c.Lq * kD);
  h.k.resize(c.B * c.H * c.Lk * kD);
  h.v.resize(c.B * c.H * c.Lk * kD);
  for (auto& x : h.q) x = c.fill == Fill::q_zero ? 0.f : bf16_round(normal(rng));
  for (auto& x : h.k) x = bf16_round(normal(rng));
  for (size_t i = 0; i < h.v.size(); ++i) {
    const int64_t d = static_cast<int64_t>(i % kD), row = static_cast<int64_t>((i / kD) % c.Lk);
    h.v[i] = c.fill == Fill::v_identity ? (row == d ? 1.f : 0.f) : bf16_round(normal(rng));
  }
  return h;
}

// Device operands in the case's layout: the element strides of each as [B, H, L, d].
struct DeviceQkv {
  __nv_bfloat16* buf = nullptr;  // one allocation (the fused layout interleaves q, k and v)
  __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr;
  AttentionOperand qs{}, ks{}, vs{};
  size_t elems = 0;
};

DeviceQkv upload(const Case& c, const HostQkv& h) {
  DeviceQkv d;
  std::vector<__nv_bfloat16> host;
  auto place = [&](const std::vector<float>& src, int64_t L, const AttentionOperand& s, int64_t offset) {
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t hh = 0; hh < c.H; ++hh)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t e = 0; e < kD; ++e)
            host[offset + b * s.batch + hh * s.head + l * s.row + e] =
                __float2bfloat16(src[((b * c.H + hh) * L + l) * kD + e]);
  };
  const int64_t HD = c.H * kD;
  if (c.layout == Layout::fused_qkv) {
    if (c.Lq != c.Lk) {
      std::fprintf(stderr, "hopper_attention_probe: the fused layout needs Lq == Lk\n");
      std::exit(2);
    }
    const AttentionOperand s{c.Lq * 3 * HD, kD, 3 * HD};
    d.qs = d.ks = d.vs = s;
    d.elems = c.B * c.Lq * 3 * HD;
    host.assign(d.elems, __float2bfloat16(0.f));
    place(h.q, c.Lq, s, 0);
    place(h.k, c.Lk, s, HD);
    place(h.v, c.Lk, s, 2 * HD);
    PROBE_CHECK(cudaMalloc(&d.buf, d.elems * 2));
    d.q = d.buf;
    d.k = d.buf + HD;
    d.v = d.buf + 2 * HD;
  } else {
    auto strides = [&](int64_t L) {
      return c.layout == Layout::head_major ? AttentionOperand{c.H * L * kD, L * kD, kD}
                                            : AttentionOperand{L * HD, kD, HD};
    };
    d.qs = strides(c.Lq);
    d.ks = d.vs = strides(c.Lk);
    const int64_t nq = c.B * c.H * c.Lq * kD, nk = c.B * c.H * c.Lk * kD;
    d.elems = nq + 2 * nk;
    host.assign(d.elems, __float2bfloat16(0.f));
    place(h.q, c.Lq, d.qs, 0);
    place(h.k, c.Lk, d.ks, nq);
    place(h.v, c.Lk, d.vs, nq + nk);
    PROBE_CHECK(cudaMalloc(&d.buf, d.elems * 2));
    d.q = d.buf;
    d.k = d.buf + nq;
    d.v = d.buf + nq + nk;
  }
  PROBE_CHECK(cudaMemcpy(d.buf, host.data(), d.elems * 2, cudaMemcpyHostToDevice));
  return d;
}

// Waits for the stream, at most `seconds`; a kernel still running then is reported as hung and the
// process exits (its context cannot be recovered).
void wait_or_die(cudaStream_t s, double seconds, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      std::printf("FAIL %s: %s\n", what.c_str(), cudaGetErrorString(e));
      std::exit(1);
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      std::printf("HUNG %s: the kernel did not finish within %.0f s (a pipeline barrier never completes)\n",
                  what.c_str(), seconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// out [B, H, Lq, d] (contiguous, head-major) from the kernel.
std::vector<float> run_kernel(const Case& c, const DeviceQkv& d, int variant, cudaStream_t s, const std::string& what) {
  __nv_bfloat16* out = nullptr;
  const size_t n = c.B * c.H * c.Lq * kD;
  PROBE_CHECK(cudaMalloc(&out, n * 2));
  PROBE_CHECK(cudaMemsetAsync(out, 0xFF, n * 2, s));  // NaN: an unwritten element fails the check
  const AttentionOperand os{c.H * c.Lq * kD, c.Lq * kD, kD};
  const int rc =
      autooptim::cuda::launch_hopper_attention(d.q, d.k, d.v, out, d.qs, d.ks, d.vs, os, c.B, c.H, c.Lq, c.Lk, kD,
                                               1.f / std::sqrt(static_cast<float>(kD)), variant - 1, s);
  if (rc != 0) {
    std::printf("FAIL %s: launch returned %d (%s)\n", what.c_str(), rc,
                cudaGetErrorString(static_cast<cudaError_t>(rc)));
    std::exit(1);
  }
  wait_or_die(s, 10.0, what);
  std::vector<__nv_bfloat16> host(n);
  PROBE_CHECK(cudaMemcpy(host.data(), out, n * 2, cudaMemcpyDeviceToHost));
  PROBE_CHECK(cudaFree(out));
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = __bfloat162float(host[i]);
  return r;
}

// One row of the reference in float64: softmax(q k^T / sqrt(d)) v.
void reference_row(const HostQkv& h, const Case& c, int64_t b, int64_t hh, int64_t i, double* out) {
  const float* q = &h.q[((b * c.H + hh) * c.Lq + i) * kD];
  std::vector<double> s(c.Lk);
  double mx = -INFINITY;
  for (int64_t j = 0; j < c.Lk; ++j) {
    const float* k = &h.k[((b * c.H + hh) * c.Lk + j) * kD];
    double acc = 0;
    for (int e = 0; e < kD; ++e) acc += static_cast<double>(q[e]) * k[e];
    s[j] = acc / std::sqrt(static_cast<double>(kD));
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int e = 0; e < kD; ++e) out[e] = 0;
  for (int64_t j = 0; j < c.Lk; ++j) {
    const float* v = &h.v[((b * c.H + hh) * c.Lk + j) * kD];
    const double p = s[j] / sum;
    for (int e = 0; e < kD; ++e) out[e] += p * v[e];
  }
}

// Squared error and reference norm, accumulated per group.
struct Acc {
  double err = 0, ref = 0;
  bool nan = false;
  void add(double o, double r) {
    if (!std::isfinite(o)) nan = true;
    err += (o - r) * (o - r);
    ref += r * r;
  }
  double rel() const { return nan ? INFINITY : std::sqrt(err / std::max(ref, 1e-30)); }
};

// Compares the rows `rows` of every (b, h) in `heads` (all when empty); prints the split; returns the
// overall relative L2 error.
double compare(const Case& c, const HostQkv& h, const std::vector<float>& out, const std::vector<int64_t>& rows,
               int64_t heads, const std::string& what, bool verbose) {
  Acc all, wg[2], half[2], tail_rows;
  std::vector<double> ref(kD);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t hh = 0; hh < std::min(heads, c.H); ++hh)
      for (const int64_t i : rows) {
        reference_row(h, c, b, hh, i, ref.data());
        const float* o = &out[((b * c.H + hh) * c.Lq + i) * kD];
        const bool last_tile_row = i >= (c.Lq - 1) / 128 * 128;
        for (int e = 0; e < kD; ++e) {
          all.add(o[e], ref[e]);
          wg[(i % 128) / 64].add(o[e], ref[e]);
          half[e / 64].add(o[e], ref[e]);
          if (last_tile_row) tail_rows.add(o[e], ref[e]);
        }
      }
  const double r = all.rel();
  if (verbose || !(r <= 1e-2))
    std::printf(
        "  %-58s rel L2 %.2e | rows 0-63 of a tile %.2e, 64-127 %.2e | d 0-63 %.2e, 64-127 %.2e | last row tile %.2e\n",
        what.c_str(), r, wg[0].rel(), wg[1].rel(), half[0].rel(), half[1].rel(), tail_rows.rel());
  return r;
}

std::vector<int64_t> all_rows(int64_t L) {
  std::vector<int64_t> r(L);
  for (int64_t i = 0; i < L; ++i) r[i] = i;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> variants = {1, 2, 3, 4, 5, 6};
  bool official = true, small = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--variants" && i + 1 < argc) {
      variants.clear();
      for (const char* p = argv[++i]; *p;) {
        variants.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else if (a == "--skip-official") {
      official = false;
    } else if (a == "--official-only") {
      small = false;
    } else {
      std::fprintf(
          stderr,
          "hopper_attention_probe: unknown argument '%s' (--variants 1,2,... --skip-official --official-only)\n",
          a.c_str());
      return 2;
    }
  }
  for (const int v : variants)
    if (v < 1 || v > 6) {
      std::fprintf(stderr, "hopper_attention_probe: variant %d is not 1-6\n", v);
      return 2;
    }
  int dev = 0;
  PROBE_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  PROBE_CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (compute capability %d.%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  if (!autooptim::cuda::hopper_attention_supported(dev)) {
    std::printf("hopper_attention_probe: this GPU or build cannot run the kernel (it needs compute capability 9.0)\n");
    return 77;
  }
  cudaStream_t s;
  PROBE_CHECK(cudaStreamCreate(&s));
  int failures = 0;

  if (small) {
    const std::vector<Case> cases = {
        {1, 1, 128, 128, Layout::head_major, Fill::q_zero},      // P V alone
        {1, 1, 128, 128, Layout::head_major, Fill::v_identity},  // Q K^T + softmax alone (P itself)
        {1, 1, 128, 100, Layout::head_major, Fill::v_identity},  // ... with the last key tile masked
        {1, 1, 128, 128, Layout::head_major, Fill::random},
        {1, 2, 128, 512, Layout::head_major, Fill::random},  // several key tiles (a stage ring's wrap)
        {1, 2, 1, 777, Layout::head_major, Fill::random},
        {2, 3, 129, 129, Layout::token_major, Fill::random},
        {1, 2, 777, 777, Layout::fused_qkv, Fill::random},
        {2, 2, 127, 127, Layout::fused_qkv, Fill::random},
    };
    for (const int v : variants)
      for (const Case& c : cases) {
        const HostQkv h = make_inputs(c, 1000 + c.Lq * 7 + c.Lk);
        DeviceQkv d = upload(c, h);
        char what[160];
        std::snprintf(what, sizeof what, "variant %d, B %lld H %lld Lq %lld Lk %lld, %s, %s", v,
                      static_cast<long long>(c.B), static_cast<long long>(c.H), static_cast<long long>(c.Lq),
                      static_cast<long long>(c.Lk), name(c.layout), name(c.fill));
        const auto out = run_kernel(c, d, v, s, what);
        const double r = compare(c, h, out, all_rows(c.Lq), c.H, what, false);
        // bf16 P and a bf16 output: ~4e-3 of rel L2 is the rounding; 1e-2 leaves room, a wrong index does not.
        if (!(r <= 1e-2)) {
          ++failures;
          std::printf("FAIL %s\n", what);
        }
        PROBE_CHECK(cudaFree(d.buf));
      }
    std::printf("small shapes: %s (%zu variants x 9 cases)\n", failures ? "FAILED" : "all passed", variants.size());
  }

  if (official) {
    const Case c{1, 24, 27280, 27280, Layout::fused_qkv, Fill::random};
    const HostQkv h = make_inputs(c, 7);
    DeviceQkv d = upload(c, h);
    const double flops = 4.0 * c.H * c.Lq * static_cast<double>(c.Lk) * kD;
    // Sampled rows of the first head: both warpgroups' rows of the first, a middle and the last query tile.
    std::vector<int64_t> rows;
    for (const int64_t i : {0ll, 5ll, 63ll, 64ll, 100ll, 127ll, 13700ll, 13763ll, 13800ll, 27263ll, 27279ll})
      rows.push_back(i);
    cudaEvent_t e0, e1;
    PROBE_CHECK(cudaEventCreate(&e0));
    PROBE_CHECK(cudaEventCreate(&e1));
    __nv_bfloat16* out = nullptr;
    const size_t n = c.B * c.H * c.Lq * kD;
    PROBE_CHECK(cudaMalloc(&out, n * 2));
    const AttentionOperand os{c.H * c.Lq * kD, c.Lq * kD, kD};
    for (const int v : variants) {
      const std::string what = "official shape, variant " + std::to_string(v);
      const auto got = run_kernel(c, d, v, s, what);  // also the warm-up
      const double r = compare(c, h, got, rows, 1, what + " (11 rows of head 0)", true);
      if (!(r <= 1e-2)) {
        ++failures;
        std::printf("FAIL %s\n", what.c_str());
      }
      PROBE_CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < 5; ++i)
        autooptim::cuda::launch_hopper_attention(d.q, d.k, d.v, out, d.qs, d.ks, d.vs, os, c.B, c.H, c.Lq, c.Lk, kD,
                                                 1.f / std::sqrt(128.f), v - 1, s);
      PROBE_CHECK(cudaEventRecord(e1, s));
      wait_or_die(s, 30.0, what + " timed");
      float ms = 0;
      PROBE_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      ms /= 5;
      std::printf("official shape self-attention, fused QKV rows: hopper_attention %d %.2f ms (%.0f TFLOP/s)\n", v, ms,
                  flops / ms * 1e-9);
    }
    PROBE_CHECK(cudaFree(out));
    PROBE_CHECK(cudaFree(d.buf));
  }
  std::printf("%s\n", failures ? "hopper_attention_probe: FAILED" : "hopper_attention_probe: all checks passed");
  return failures ? 1 : 0;
}
