// Kernel technique: the transformer's dense attention on our own Hopper kernel (hopper_attention.cu, sm_90a:
// TMA loads by a producer warpgroup, wgmma for both GEMMs, the softmax of one key tile overlapping the P V
// GEMM of the previous one). At the official shape self-attention is over half of the fused forward; the
// figures against cuDNN's kernel are in docs/journal/2026-12-05.md (fourth session). The value selects the kernel
// variant: key tiles of 128 with 2 shared-memory stages (1), the same with the two consumer warpgroups taking turns at
// the tensor cores (2, ping-pong), 3 and 4 the same with 3 stages; key tiles of 176 (FA3's choice for this head_dim;
// 27,280 = 155 x 176) with 2 stages, without (5) and with (6) ping-pong. Calls it does not take (another head_dim,
// float32, another GPU) stay on attention_backend's path.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/hopper_attention_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(hopper_attention) {
  Technique t;
  t.name = "hopper_attention";
  t.family = "kernel";
  // The same function with float32 softmax statistics and P rounded to bf16 before P V, as the flash and
  // cuDNN kernels do; it differs from them by rounding only (tests/runtime/test_gpu_kernels.cpp bounds it).
  t.lossless = true;
  t.summary =
      "dense attention on our sm_90a kernel (TMA + wgmma, softmax overlapped with the P V GEMM) for head_dim 128";
  t.flags = {int_flag(
      "hopper_attention", field(&HopperAttentionOptions::variant), 0, 6,
      "our Hopper attention kernel's variant (0: off; 1-4: 128-key tiles, 2 or 3 stages, without/with ping-pong; 5/6: "
      "176-key tiles)")};
  t.switch_flag = "hopper_attention";
  t.hooks = {"attention"};
  t.supersedes = {"attention_backend"};  // it takes every attention the backend would have run
  t.engagement = {{"kernel.hopper_attention.calls",
                   "hopper_attention is on but no attention ran on it (it needs a CUDA build, a compute capability 9.0 "
                   "GPU, bf16 and head_dim 128)"}};
  t.search = [](const SearchContext& c) {
    std::vector<SearchPoint> p;
    // Fastest first, as measured at the official shape on an H100 (an executor's budget may end early).
    if (c.gpu)
      for (int v : {6, 5, 1, 4, 2, 3})
        p.push_back({"hopper_attention-" + std::to_string(v), {{"hopper_attention", v}}});
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>

#include "runtime/nn.h"
#include "runtime/techniques/kernel/fused_common.h"
#include "runtime/techniques/kernel/hopper_attention.h"
#include "runtime/torch_compat.h"

namespace autooptim::runtime::techniques {

namespace {

bool operand_fits(const at::Tensor& t, int64_t B, int64_t H) {
  return t.dim() == 4 && t.size(0) == B && t.size(1) == H && t.size(3) == 128 && fused::gpu_bf16(t) &&
         t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 && t.stride(2) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

// Everything the kernel needs of its operands and their GPU, checked once per call.
bool operands_fit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (q.dim() != 4) return false;
  const int64_t B = q.size(0), H = q.size(1);
  if (!operand_fits(q, B, H) || !operand_fits(k, B, H) || !operand_fits(v, B, H) || k.size(2) != v.size(2) ||
      q.get_device() != k.get_device() || q.get_device() != v.get_device())
    return false;
#ifdef AUTOOPTIM_WITH_CUDA
  return cuda::hopper_attention_supported(q.get_device());
#else
  return false;
#endif
}

cuda::AttentionOperand strides(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

bool capturing() {
#ifdef AUTOOPTIM_WITH_CUDA
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(static_cast<cudaStream_t>(fused::stream()), &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
#else
  return false;
#endif
}

// Once per process and variant, on the first call outside a graph capture: the first head's first 256
// query rows against libtorch's attention of the same operands. A kernel that is wrong on this GPU or
// driver stops the run with the switch named, instead of passing a wrong clip on to the quality gate.
void self_check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, int variant) {
  static std::atomic<unsigned> checked{0};  // bit v: variant v passed
  const unsigned bit = 1u << variant;
  if ((checked.load(std::memory_order_acquire) & bit) || capturing()) return;
  auto first = [](const at::Tensor& t, int64_t rows) { return t.narrow(0, 0, 1).narrow(1, 0, 1).narrow(2, 0, rows); };
  const int64_t rows = std::min<int64_t>(q.size(2), 256);
  const at::Tensor ref = compat::sdpa(first(q, rows), first(k, k.size(2)), first(v, v.size(2)));
  const double err = rel_l2(first(out, rows).to(at::kFloat), ref.to(at::kFloat));
  if (!(err <= 2e-2)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.3g", err);
    throw Error("hopper_attention: variant " + std::to_string(variant) +
                " does not compute libtorch's attention on this GPU (relative L2 " + buf +
                " on the first head's first rows); turn the switch off");
  }
  checked.fetch_or(bit, std::memory_order_release);
}

// The launch itself, on operands operands_fit has accepted.
at::Tensor launch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int variant) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), d = q.size(3);
  at::Tensor out = at::empty({B, Lq, H, d}, q.options());  // the layout the output projection reads
#ifdef AUTOOPTIM_WITH_CUDA
  const cuda::AttentionOperand os{out.stride(0), out.stride(2), out.stride(1)};
  fused::check(cuda::launch_hopper_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), strides(q),
                                             strides(k), strides(v), os, B, H, Lq, Lk, d,
                                             static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), variant - 1,
                                             fused::stream()),
               "hopper_attention");
#else
  (void)v;
  (void)Lk;
  (void)variant;
#endif
  return out.transpose(1, 2);
}

}  // namespace

bool hopper_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc) {
  return fc && fc->options && fc->options->of<HopperAttentionOptions>().variant != 0 && operands_fit(q, k, v);
}

at::Tensor hopper_attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int variant) {
  if (!operands_fit(q, k, v))
    throw Error(
        "hopper_attention: the operands or the GPU do not fit the kernel (bf16 [B, heads, L, 128] on a compute "
        "capability 9.0 GPU)");
  return launch(q, k, v, variant);
}

// Called after hopper_attention_applies: the operands are not checked again.
at::Tensor hopper_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc) {
  const int variant = static_cast<int>(fc->options->of<HopperAttentionOptions>().variant);
  at::Tensor out = launch(q, k, v, variant);
  self_check(q, k, v, out, variant);
  fc->count("kernel.hopper_attention.calls");
  return out;
}

AUTOOPTIM_EXTENSIONS(hopper_attention) {
  points.attention.add({"hopper_attention", 20,
                        [](const RuntimeOptions& o) { return o.of<HopperAttentionOptions>().variant != 0; },
                        [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const ForwardContext* fc) -> std::optional<at::Tensor> {
                          if (!hopper_attention_applies(q, k, v, fc)) return std::nullopt;
                          return hopper_attention(q, k, v, fc);
                        }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
