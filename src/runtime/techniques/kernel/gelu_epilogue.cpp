// Kernel technique: the FFN's GELU-tanh in the first projection's cuBLASLt GEMM epilogue.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/gelu_epilogue_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(gelu_epilogue) {
  Technique t;
  t.name = "gelu_epilogue";
  t.family = "kernel";
  // Not bit-identical to libtorch's unfused kernels (rounding order; docs/journal/2026-12-03.md has the
  // set's PSNR on a clip of the random model): judged at the lossy quality floor.
  t.lossless = false;
  t.summary = "the FFN's GELU-tanh in the first projection's cuBLASLt GEMM epilogue";
  t.flags = {
      bool_flag("gelu_epilogue", field(&GeluEpilogueOptions::on), "FFN GELU-tanh in the GEMM epilogue (cuBLASLt)")};
  t.switch_flag = "gelu_epilogue";
  t.hooks = {"block.ffn_in"};
  t.engagement = {
      {"kernel.gelu_epilogue.launches",
       "gelu_epilogue is on but no GEMM with a GELU epilogue ran (needs a CUDA build and bf16 on the GPU)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"gelu_epilogue", {{"gelu_epilogue", true}}}} : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/techniques/kernel/gemm_autotune.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/fused_block_ops.h"
#include "runtime/techniques/kernel/fused_common.h"

namespace autooptim::runtime::techniques {

bool gelu_epilogue_applies(const ForwardContext* fc, const at::Tensor& x) {
  return fc && fc->options && fc->options->of<GeluEpilogueOptions>().on && fused::gpu_bf16(x);
}

at::Tensor gelu_epilogue_linear(const Linear& lin, const at::Tensor& x, const ForwardContext* fc) {
  const int64_t K = x.size(-1);
  const at::Tensor x2 = x.reshape({-1, K});
  if (!lin->bias.defined()) throw Error("gelu_epilogue: the FFN projection has no bias");
  // beta = alpha = 1 with a 1-D bias: libtorch routes this to cuBLASLt's GELU_BIAS epilogue (tanh GELU).
  at::Tensor y = at::_addmm_activation(lin->bias, x2, lin->weight.t(), 1, 1, /*use_gelu=*/true);
  fc->count("kernel.gelu_epilogue.launches");
  auto shape = x.sizes().vec();
  shape.back() = lin->weight.size(0);
  return y.view(shape);
}

// The FFN's first projection with its GELU as one GEMM: the tuned algorithm with the same epilogue where
// gemm_autotune has one, else libtorch's cuBLASLt GELU_BIAS epilogue.
AUTOOPTIM_EXTENSIONS(gelu_epilogue) {
  points.linear_gelu.add(
      {"gelu_epilogue", 10, [](const RuntimeOptions& o) { return o.of<GeluEpilogueOptions>().on; },
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         if (!gelu_epilogue_applies(fc, x)) return std::nullopt;
         ProfileScope ps("gemm", [&] { return gemm_detail(x, lin->weight.size(0)); });
         at::Tensor hidden = tuned_linear(x, lin->weight, lin->bias, /*gelu=*/true, fc);
         if (!hidden.defined()) return gelu_epilogue_linear(lin, x, fc);
         fc->count("kernel.gelu_epilogue.launches");
         return hidden;
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
