// Kernel technique (VAE decoder): decode in channels_last_3d (NDHWC), the layout cuDNN's tensor-core
// convolutions work in, so that no conv transposes its input and output around the kernel. The weights
// are a converted copy (WanPipeline::decoding_vae); the baseline's modules are never touched.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_channels_last_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_channels_last) {
  Technique t;
  t.name = "vae_channels_last";
  t.family = "kernel";
  // A memory layout: the same convolutions in the same precision, so lossless in the gate's sense (judged
  // against the precision floor, docs/gate-defences.md). Bit-identical on the CPU; on a GPU cuDNN may pick
  // another algorithm for the layout. Declared lossy, it failed alone on the CPU ("a lossy technique whose
  // output equals the off run's") while it rode along in compositions.
  t.lossless = true;
  t.summary = "VAE decode in channels_last_3d (NDHWC) activations and weights";
  t.flags = {bool_flag("vae_channels_last", field(&VaeChannelsLastOptions::on), "decode in channels_last_3d")};
  t.switch_flag = "vae_channels_last";
  t.hooks = {"pipeline.decode"};
  t.engagement = {{"kernel.vae_channels_last.decodes", "vae_channels_last is on but no decode ran channels-last"}};
  // On the CPU too: oneDNN's NDHWC convs (the tiny decode 0.80 s -> 0.63 s, bit-identical there; with
  // vae_bf16 0.30 s).
  t.search = [](const SearchContext&) {
    return std::vector<SearchPoint>{{"vae_channels_last", {{"vae_channels_last", true}}}};
  };
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
  void decoded(const VaeRun& run) override { run.count("kernel.vae_channels_last.decodes"); }
};

}  // namespace

// The decode's layout (the decoder keeps its activations channels-last; the pipeline's decoding copy of
// the weights is channels-last), and its engagement count.
AUTOOPTIM_EXTENSIONS(vae_channels_last) {
  const auto on = [](const RuntimeOptions& o) { return o.of<VaeChannelsLastOptions>().on; };
  points.vae_layout.add({"vae_channels_last", 10, on, at::MemoryFormat::ChannelsLast3d});
  points.decode_stage.add(
      {"vae_channels_last", 10, on, [](const at::Tensor&, const VaeRun&) -> std::unique_ptr<ext::DecodeStage> {
         return std::make_unique<CountDecodes>();
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
