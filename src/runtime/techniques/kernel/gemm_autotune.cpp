// Kernel technique: the transformer's linear layers through cuBLASLt with, per GEMM shape, the fastest of
// the algorithms its heuristic offers, timed on the first call of that shape in the process (the
// default is the heuristic's first). At the official shape the profile measured the block's GEMMs at
// 682-786 TFLOP/s against a 787-796 TFLOP/s matmul peak: the [27280 x 3072] x [3072 x 3072] ones at
// ~706 (19.4 waves of 256-wide tiles on 132 SMs leave the last wave half empty) and the FFN's first with
// its GELU epilogue at 683. Another algorithm may sum in another order: judged by the quality gate.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/gemm_autotune_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(gemm_autotune) {
  Technique t;
  t.name = "gemm_autotune";
  t.family = "kernel";
  t.lossless = false;  // another GEMM algorithm: another summation order
  t.summary =
      "the transformer's GEMMs through cuBLASLt with the fastest of its heuristic's algorithms per shape, timed once";
  t.flags = {bool_flag("gemm_autotune", field(&GemmAutotuneOptions::on),
                       "time cuBLASLt's candidate algorithms per GEMM shape and use the fastest")};
  t.switch_flag = "gemm_autotune";
  t.hooks = {"attention.projections", "block.ffn_in", "block.ffn_out"};
  t.engagement = {{"kernel.gemm_autotune.gemms",
                   "gemm_autotune is on but no GEMM ran through a tuned algorithm (needs a CUDA build with cuBLASLt "
                   "and bf16 on the GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"gemm_autotune", {{"gemm_autotune", true}}}} : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "base/log.h"
#include "runtime/techniques/kernel/gemm_autotune.h"
#include "runtime/techniques/kernel/fused_common.h"

#if defined(AUTOOPTIM_WITH_CUDA) && defined(AUTOOPTIM_WITH_CUBLASLT)
#define AUTOOPTIM_GEMM_AUTOTUNE 1
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>
#endif

namespace autooptim::runtime::techniques {

#ifdef AUTOOPTIM_GEMM_AUTOTUNE
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kCandidates = 16;

// The largest power of two (at most 256) that divides the address: what the algorithms may assume.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al /= 2;
  return al;
}

struct Key {
  int64_t m, n, k;
  bool bias, gelu;
  uint32_t align_a, align_b, align_d, align_bias;
  int device;
  bool operator<(const Key& o) const {
    return std::tie(m, n, k, bias, gelu, align_a, align_b, align_d, align_bias, device) <
           std::tie(o.m, o.n, o.k, o.bias, o.gelu, o.align_a, o.align_b, o.align_d, o.align_bias, o.device);
  }
};

struct Tuned {
  bool ok = false;  // false: cuBLASLt offered nothing that ran; the caller's op runs
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_mutex;
std::map<Key, Tuned> g_tuned;

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    if (cublasLtCreate(&x) != CUBLAS_STATUS_SUCCESS) x = nullptr;
    return x;
  }();
  return h;
}

// The descriptors of y [m, n] = x [m, k] W[n, k]^T (+ bias, GELU-tanh) in cuBLASLt's column-major terms:
// D [n, m] = op(A) B with A = W stored [k, n] (transposed), B = x stored [k, m].
struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  bool ok = false;
  Problem(int64_t m, int64_t n, int64_t k, const void* bias, bool gelu) {
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (bias)
      epi = gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    else if (gelu)
      epi = CUBLASLT_EPILOGUE_GELU;
    bool good =
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == CUBLAS_STATUS_SUCCESS;
    if (good && bias) {
      const cudaDataType_t bt = CUDA_R_16BF;
      good = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) ==
                 CUBLAS_STATUS_SUCCESS;
    }
    ok = good && cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, m, k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, n, m, n) == CUBLAS_STATUS_SUCCESS;
  }
  ~Problem() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
  cublasStatus_t run(const cublasLtMatmulAlgo_t* algo, const void* w, const void* x, void* y, void* ws,
                     cudaStream_t s) const {
    const float one = 1.f, zero = 0.f;
    return cublasLtMatmul(lt_handle(), op, &one, w, a, x, b, &zero, y, d, y, d, algo, ws, kWorkspaceBytes, s);
  }
};

// Times each candidate the heuristic offers on the real operands (one warm-up, then three runs between
// events) and keeps the fastest; y holds a valid result afterwards (the last run is the winner's).
Tuned tune(const Key& key, const Problem& p, const void* w, const void* x, void* y, void* ws, cudaStream_t s) {
  Tuned best;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return best;
  const size_t wsb = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a,
                                       sizeof key.align_a);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b,
                                       sizeof key.align_b);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_d,
                                       sizeof key.align_d);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d,
                                       sizeof key.align_d);
  std::vector<cublasLtMatmulHeuristicResult_t> cand(kCandidates);
  int returned = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.op, p.a, p.b, p.d, p.d, pref, kCandidates, cand.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || returned <= 0) return best;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    if (e0) cudaEventDestroy(e0);
    return best;
  }
  float best_ms = 0.f;
  for (int i = 0; i < returned; ++i) {
    if (cand[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (p.run(&cand[i].algo, w, x, y, ws, s) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; refused: skipped
    cudaEventRecord(e0, s);
    bool ran = true;
    for (int r = 0; r < 3 && ran; ++r) ran = p.run(&cand[i].algo, w, x, y, ws, s) == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(e1, s);
    float ms = 0.f;
    if (!ran || cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) continue;
    if (!best.ok || ms < best_ms) best = {true, cand[i].algo}, best_ms = ms;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGetLastError();  // a refused candidate leaves no sticky error for the next launch check
  if (best.ok && p.run(&best.algo, w, x, y, ws, s) != CUBLAS_STATUS_SUCCESS) best.ok = false;
  return best;
}

}  // namespace
#endif  // AUTOOPTIM_GEMM_AUTOTUNE

at::Tensor tuned_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool gelu,
                        const ForwardContext* fc) {
  if (!fc || !fc->options || !fc->options->of<GemmAutotuneOptions>().on) return {};
#ifdef AUTOOPTIM_GEMM_AUTOTUNE
  if (!fused::gpu_bf16(x) || !fused::gpu_bf16(weight) || (bias.defined() && !fused::gpu_bf16(bias)) || x.dim() < 2 ||
      weight.dim() != 2 || !x.is_contiguous() || !weight.is_contiguous() || (bias.defined() && !bias.is_contiguous()) ||
      x.size(-1) != weight.size(1) || x.size(-1) % 8 || weight.size(0) % 8 || !lt_handle())
    return {};
  const int64_t k = x.size(-1), n = weight.size(0), m = x.numel() / k;
  if (m == 0) return {};
  auto shape = x.sizes().vec();
  shape.back() = n;
  at::Tensor y = at::empty(shape, x.options());
  const at::Tensor ws = at::empty({static_cast<int64_t>(kWorkspaceBytes)}, x.options().dtype(at::kByte));
  const auto s = static_cast<cudaStream_t>(fused::stream());
  const Key key{m,
                n,
                k,
                bias.defined(),
                gelu,
                alignment_of(weight.data_ptr()),
                alignment_of(x.data_ptr()),
                alignment_of(y.data_ptr()),
                bias.defined() ? alignment_of(bias.data_ptr()) : 256u,
                static_cast<int>(x.get_device())};
  const Problem p(m, n, k, bias.defined() ? bias.data_ptr() : nullptr, gelu);
  if (!p.ok) return {};
  Tuned t;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_tuned.find(key);
    if (it != g_tuned.end()) t = it->second, found = true;
  }
  if (!found) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone)
      return {};  // no timing inside a CUDA graph capture: the caller's op is captured instead
    t = tune(key, p, weight.data_ptr(), x.data_ptr(), y.data_ptr(), ws.data_ptr(), s);
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_tuned[key] = t;
    }
    fc->count("kernel.gemm_autotune.shapes_tuned");
    if (!t.ok) {
      log::warn("gemm_autotune: cuBLASLt ran no algorithm for [" + std::to_string(m) + " x " + std::to_string(k) +
                "] x [" + std::to_string(k) + " x " + std::to_string(n) + "]; libtorch's GEMM runs there");
      return {};
    }
  } else {
    if (!t.ok) return {};
    if (p.run(&t.algo, weight.data_ptr(), x.data_ptr(), y.data_ptr(), ws.data_ptr(), s) != CUBLAS_STATUS_SUCCESS)
      throw Error("gemm_autotune: cuBLASLt refused the algorithm it was tuned with for [" + std::to_string(m) + " x " +
                  std::to_string(k) + "] x [" + std::to_string(k) + " x " + std::to_string(n) + "]");
  }
  fc->count("kernel.gemm_autotune.gemms");
  return y;
#else
  (void)x, (void)weight, (void)bias, (void)gelu;
  return {};
#endif
}

// The tuned GEMM at the linear extension point (where it runs no algorithm, the next override or the
// reference runs).
AUTOOPTIM_EXTENSIONS(gemm_autotune) {
  points.linear.add({"gemm_autotune", 10, [](const RuntimeOptions& o) { return o.of<GemmAutotuneOptions>().on; },
                     [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
                       at::Tensor y = tuned_linear(x, lin->weight, lin->bias, /*gelu=*/false, fc);
                       if (!y.defined()) return std::nullopt;
                       return y;
                     }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
