// Quantisation technique (family quant, lossy): FP8 e4m3 GEMMs for the transformer's large linears
// (see fp8_linear.h).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/quant/fp8_linear_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(fp8) {
  Technique t;
  t.name = "fp8";
  t.family = "quant";
  t.lossless = false;
  t.summary = "FP8 e4m3 GEMMs (per-channel weight, per-token activation scales) for the transformer's large linears";
  t.group = "quant";
  t.flags = {
      bool_flag("fp8", field(&QuantOptions::fp8), "FP8 GEMMs through cuBLASLt (GPU builds, libtorch >= 2.5, sm_89+)")};
  t.switch_flag = "quant.fp8";
  t.hooks = {"self_attention.qkv_projection", "attention.output", "cross_attention.q", "block.ffn"};
  t.supersedes = {"gelu_epilogue"};  // the FFN's GELU is folded into the FP8 quantisation of its second GEMM's input
  t.engagement = {{"quant.fp8.gemms",
                   "quant.fp8 is on but no FP8 GEMM ran (needs a CUDA build, libtorch >= 2.5 and an sm_89+ GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"fp8", {{"quant", {{"fp8", true}}}}}} : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/techniques/quant/fp8_linear.h"

#include <torch/version.h>

#include <mutex>
#include <unordered_map>

#include "base/error.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/fused_kernels_cuda.h"

#ifdef AUTOOPTIM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define AUTOOPTIM_HAVE_SCALED_MM 1
#endif

namespace autooptim::runtime::techniques {
namespace {

constexpr float kE4M3Max = 448.f;

bool fp8_device(const at::Tensor& x) {
#if defined(AUTOOPTIM_WITH_CUDA) && defined(AUTOOPTIM_HAVE_SCALED_MM)
  if (!x.is_cuda()) return false;
  const auto* p = at::cuda::getDeviceProperties(x.device().index());
  return p->major > 8 || (p->major == 8 && p->minor >= 9);
#else
  (void)x;
  return false;
#endif
}

// Quantised weights by the bf16 weight's storage (one model per process; a reload makes new storages).
std::mutex g_mu;
std::unordered_map<const void*, Fp8Weight> g_weights;

const Fp8Weight& cached_weight(const at::Tensor& w) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_weights.find(w.data_ptr());
  if (it == g_weights.end() || it->second.w.size(0) != w.size(0) || it->second.w.device() != w.device())
    it = g_weights.insert_or_assign(w.data_ptr(), quantize_weight_e4m3(w)).first;
  return it->second;
}

}  // namespace

Fp8Weight quantize_weight_e4m3(const at::Tensor& weight) {
#ifdef AUTOOPTIM_HAVE_SCALED_MM
  at::NoGradGuard g;
  const at::Tensor wf = weight.to(at::kFloat);
  const at::Tensor scale = (wf.abs().amax(1, true) / kE4M3Max).clamp_min(1e-12);  // [N, 1]
  Fp8Weight q;
  q.w = (wf / scale).to(at::kFloat8_e4m3fn).contiguous();
  q.scale = scale.view({1, -1}).contiguous();
  return q;
#else
  (void)weight;
  throw Error("fp8: this libtorch has no float8 support (needs 2.5 or later)");
#endif
}

std::pair<at::Tensor, at::Tensor> quantize_rows_e4m3(const at::Tensor& x, bool gelu) {
#if defined(AUTOOPTIM_WITH_CUDA) && defined(AUTOOPTIM_HAVE_SCALED_MM)
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16 || x.dim() != 2 || x.stride(1) != 1)
    throw Error("fp8: activations must be a bf16 CUDA matrix with contiguous rows");
  const int64_t M = x.size(0), K = x.size(1);
  at::Tensor q = at::empty({M, K}, x.options().dtype(at::kFloat8_e4m3fn));
  at::Tensor s = at::empty({M, 1}, x.options().dtype(at::kFloat));
  const int rc = cuda::launch_quantize_rows_e4m3(x.data_ptr(), x.stride(0), q.data_ptr(), s.data_ptr<float>(), M, K,
                                                 gelu, 1e-12f, at::cuda::getCurrentCUDAStream().stream());
  if (rc != 0) throw Error("fp8: quantisation kernel failed to launch (CUDA error " + std::to_string(rc) + ")");
  return {q, s};
#else
  (void)x;
  (void)gelu;
  throw Error("fp8: this build has no CUDA float8 support");
#endif
}

bool fp8_applies(const ForwardContext* fc, const at::Tensor& x, const Linear& lin) {
  if (!(fc && fc->options && fc->options->of<QuantOptions>().fp8)) return false;
  if (x.scalar_type() != at::kBFloat16 || lin->weight.scalar_type() != at::kBFloat16) return false;
  // cuBLASLt's FP8 GEMM needs both matrix widths divisible by 16.
  return lin->weight.size(0) % 16 == 0 && lin->weight.size(1) % 16 == 0 && fp8_device(x);
}

namespace {

#ifdef AUTOOPTIM_HAVE_SCALED_MM
at::Tensor scaled_gemm(const Linear& lin, const at::Tensor& xq, const at::Tensor& xs, const at::Tensor& x,
                       const ForwardContext* fc) {
  const Fp8Weight& w = cached_weight(lin->weight);
  const c10::optional<at::Tensor> bias =
      lin->bias.defined() ? c10::optional<at::Tensor>(lin->bias.to(at::kBFloat16)) : c10::nullopt;
  at::Tensor y = at::_scaled_mm(xq, w.w.t(), xs, w.scale, bias, c10::nullopt, at::kBFloat16, false);
  fc->count("quant.fp8.gemms");
  auto shape = x.sizes().vec();
  shape.back() = lin->weight.size(0);
  return y.view(shape);
}

std::pair<at::Tensor, at::Tensor> quantize_input(const at::Tensor& x, bool gelu) {
  ProfileScope ps("quantize");
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  return quantize_rows_e4m3(x2.stride(1) == 1 ? x2 : x2.contiguous(), gelu);
}
#endif

}  // namespace

at::Tensor fp8_linear(const Linear& lin, const at::Tensor& x, const ForwardContext* fc, bool gelu_input) {
#ifdef AUTOOPTIM_HAVE_SCALED_MM
  auto [xq, xs] = quantize_input(x, gelu_input);
  return scaled_gemm(lin, xq, xs, x, fc);
#else
  (void)lin;
  (void)x;
  (void)fc;
  (void)gelu_input;
  throw Error("fp8: this libtorch has no float8 support (needs 2.5 or later)");
#endif
}

std::vector<at::Tensor> fp8_linears(const std::vector<const Linear*>& lins, const at::Tensor& x,
                                    const ForwardContext* fc) {
#ifdef AUTOOPTIM_HAVE_SCALED_MM
  auto [xq, xs] = quantize_input(x, false);
  std::vector<at::Tensor> out;
  for (const Linear* l : lins) out.push_back(scaled_gemm(*l, xq, xs, x, fc));
  return out;
#else
  (void)lins;
  (void)x;
  (void)fc;
  throw Error("fp8: this libtorch has no float8 support (needs 2.5 or later)");
#endif
}

// The FP8 GEMMs at the linear, q/k/v-projection and FFN extension points (below the fused QKV GEMM).
AUTOOPTIM_EXTENSIONS(fp8) {
  const auto on = [](const RuntimeOptions& o) { return o.of<QuantOptions>().fp8; };
  points.linear.add({"fp8", 20, on,
                     [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
                       if (!fp8_applies(fc, x, lin)) return std::nullopt;
                       return fp8_linear(lin, x, fc);
                     }});
  points.qkv.add(
      {"fp8", 10, on,
       [](const ext::QkvWeights& w, const at::Tensor& x, const ForwardContext* fc) -> std::optional<ext::Qkv> {
         if (!(fp8_applies(fc, x, w.q) && fp8_applies(fc, x, w.k) && fp8_applies(fc, x, w.v))) return std::nullopt;
         ProfileScope ps("gemm");
         auto qkv = fp8_linears({&w.q, &w.k, &w.v}, x, fc);  // x quantised once
         return ext::Qkv{qkv[0], qkv[1], qkv[2]};
       }});
  points.ffn.add({"fp8", 10, on,
                  [](const Linear& in, const Linear& out, const at::Tensor& h,
                     const ForwardContext* fc) -> std::optional<at::Tensor> {
                    if (!(fp8_applies(fc, h, in) && fp8_applies(fc, h, out))) return std::nullopt;
                    // The GELU is folded into the quantisation of the second projection's input.
                    ProfileScope ps("gemm");
                    return fp8_linear(out, fp8_linear(in, h, fc), fc, /*gelu_input=*/true);
                  }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
