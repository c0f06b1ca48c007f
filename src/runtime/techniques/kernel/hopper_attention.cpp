// Kernel technique: the transformer's dense attention on our own Hopper kernel (hopper_attention.cu, sm_90a:
// TMA loads by a producer warpgroup, wgmma for both GEMMs, the softmax of one key tile overlapping the P V
// GEMM of the previous one). At the official shape self-attention is 509 ms of the 0.906 s fused forward
// with cuDNN's kernel at ~540 TFLOP/s; an FA3-class kernel reaches ~640, which is what the lossless forward
// target (<= 0.85 s) needs. The value selects the kernel variant: 1 = 2 shared-memory stages, 2 = 2 stages
// with the two consumer warpgroups taking turns at the tensor cores (ping-pong), 3 and 4 the same with 3
// stages. Calls it does not take (another head_dim, float32, another GPU) stay on attention_backend's path.
#include "runtime/techniques/registry.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(hopper_attention) {
  Technique t;
  t.name = "hopper_attention";
  t.family = "kernel";
  // The same function with float32 softmax statistics and P rounded to bf16 before P V, as the flash and
  // cuDNN kernels do; it differs from them by rounding only (tests/test_gpu_kernels.cpp bounds it).
  t.lossless = true;
  t.summary = "dense attention on our sm_90a kernel (TMA + wgmma, softmax overlapped with the P V GEMM) for head_dim 128";
  t.flags = {int_flag("hopper_attention", [](RuntimeOptions& o) -> int64_t& { return o.hopper_attention; }, 0, 4,
                      "our Hopper attention kernel's variant (0: off; 1/2: 2 stages without/with ping-pong; 3/4: 3 stages)")};
  t.switch_flag = "hopper_attention";
  t.hooks = {"attention"};
  t.engagement = {{"kernel.hopper_attention.calls",
                   "hopper_attention is on but no attention ran on it (it needs a CUDA build, a compute capability 9.0 "
                   "GPU, bf16 and head_dim 128)"}};
  t.search = [](const SearchContext& c) {
    std::vector<SearchPoint> p;
    if (c.gpu)
      for (int v = 1; v <= 4; ++v) p.push_back({"hopper_attention-" + std::to_string(v), {{"hopper_attention", v}}});
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include <cmath>

#include "runtime/techniques/kernel/fused_common.h"
#include "runtime/techniques/kernel/hopper_attention.h"

namespace autooptim::runtime::techniques {

namespace {

bool operand_fits(const at::Tensor& t, int64_t B, int64_t H) {
  return t.dim() == 4 && t.size(0) == B && t.size(1) == H && t.size(3) == 128 && fused::gpu_bf16(t) && t.stride(3) == 1 &&
         t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 && t.stride(2) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

bool device_supported(const at::Tensor& q) {
#ifdef AUTOOPTIM_WITH_CUDA
  return cuda::hopper_attention_supported(q.get_device());
#else
  (void)q;
  return false;
#endif
}

cuda::AttentionOperand strides(const at::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

}  // namespace

bool hopper_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->hopper_attention == 0 || q.dim() != 4) return false;
  const int64_t B = q.size(0), H = q.size(1);
  return operand_fits(q, B, H) && operand_fits(k, B, H) && operand_fits(v, B, H) && k.size(2) == v.size(2) &&
         q.get_device() == k.get_device() && q.get_device() == v.get_device() && device_supported(q);
}

at::Tensor hopper_attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int variant) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Lk = k.size(2), d = q.size(3);
  if (!operand_fits(q, B, H) || !operand_fits(k, B, H) || !operand_fits(v, B, H) || k.size(2) != v.size(2) ||
      !device_supported(q))
    throw Error("hopper_attention: the operands or the GPU do not fit the kernel (bf16 [B, heads, L, 128] on a compute capability 9.0 GPU)");
  at::Tensor out = at::empty({B, Lq, H, d}, q.options());  // the layout the output projection reads
#ifdef AUTOOPTIM_WITH_CUDA
  const cuda::AttentionOperand os{out.stride(0), out.stride(2), out.stride(1)};
  fused::check(cuda::launch_hopper_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), strides(q), strides(k),
                                             strides(v), os, B, H, Lq, Lk, d, static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                                             variant - 1, fused::stream()),
               "hopper_attention");
#else
  (void)Lk;
  (void)variant;
#endif
  return out.transpose(1, 2);
}

at::Tensor hopper_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc) {
  at::Tensor out = hopper_attention_variant(q, k, v, static_cast<int>(fc->options->hopper_attention));
  fc->count("kernel.hopper_attention.calls");
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
