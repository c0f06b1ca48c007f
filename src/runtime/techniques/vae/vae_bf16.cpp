// Kernel technique (VAE decoder): decode with a bf16 copy of the VAE's weights. The RMS norms keep their
// statistics in float32 (as WanRMSNorm does in every dtype); the clip is compared with the float32 decode
// by the quality gate. The copy is made once per pipeline (WanPipeline::decoding_vae).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_bf16_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_bf16) {
  Technique t;
  t.name = "vae_bf16";
  t.family = "kernel";
  t.lossless = false;  // bf16 rounding of every activation: judged at the lossy quality floor
  t.summary = "VAE decode in bf16 (a copy of the weights; norm statistics in float32)";
  t.flags = {bool_flag("vae_bf16", field(&VaeBf16Options::on), "decode with a bf16 copy of the VAE")};
  t.switch_flag = "vae_bf16";
  t.hooks = {"pipeline.decode"};
  t.engagement = {{"kernel.vae_bf16.decodes", "vae_bf16 is on but no decode ran in bf16"}};
  // On the CPU too: oneDNN runs bf16 convs natively where the CPU has AVX512-BF16 (docs/journal/2026-12-04.md,
  // afternoon); where it has not, the executor's trials measure it slower and drop it.
  t.search = [](const SearchContext&) { return std::vector<SearchPoint>{{"vae_bf16", {{"vae_bf16", true}}}}; };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include <memory>

#include "runtime/extension_points.h"
#include "runtime/wan_vae.h"

namespace autooptim::runtime::techniques {
namespace {

struct CountDecodes : ext::DecodeStage {
  void decoded(const VaeRun& run) override { run.count("kernel.vae_bf16.decodes"); }
};

}  // namespace

// The decoding copy's dtype, and the engagement count.
AUTOOPTIM_EXTENSIONS(vae_bf16) {
  const auto on = [](const RuntimeOptions& o) { return o.of<VaeBf16Options>().on; };
  points.decode_dtype.add({"vae_bf16", 10, on, at::kBFloat16});
  points.decode_stage.add(
      {"vae_bf16", 10, on, [](const at::Tensor&, const VaeRun&) -> std::unique_ptr<ext::DecodeStage> {
         return std::make_unique<CountDecodes>();
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
