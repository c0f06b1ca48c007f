// Kernel technique: TI2V gives every token a timestep (mask * t: 0 on a conditioning image's frame, t
// elsewhere), and the reference then computes the time embedding and the blocks' modulation per token:
// [B, L, 6, D] rows of the projection, which each block without the fused kernels widens to float32 and
// adds to its table (at the official shape ~7 GB of traffic a block), and which the fused kernels read two
// rows per token at a time. In text-to-video every token of a sample carries the same t, so this switch
// hands the transformer the per-sample timestep [B] instead: the same values through the same per-element
// operations, with the modulation broadcast from one row per sample. The model's own per-sample path
// (Wan2.1's) computes it; the clip is the same.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/uniform_timestep_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(uniform_timestep) {
  Technique t;
  t.name = "uniform_timestep";
  t.family = "kernel";
  t.lossless = true;
  t.summary =
      "a per-token timestep with one value per sample (text-to-video) handled per sample: modulation broadcast from "
      "one row";
  t.flags = {bool_flag("uniform_timestep", field(&UniformTimestepOptions::on),
                       "a per-token timestep that is constant within each sample handled per sample")};
  t.switch_flag = "uniform_timestep";
  t.hooks = {"transformer.time_embedding"};
  // With one timestep per sample there are no repeated per-token rows left to deduplicate (text-to-video;
  // on image-to-video this switch is the idle one).
  t.supersedes = {"timestep_dedup"};
  t.engagement = {{"kernel.uniform_timestep.samples",
                   "uniform_timestep is on but no forward had one timestep per sample (image-to-video gives the "
                   "image's frame its own)"}};
  t.search = [](const SearchContext&) {
    return std::vector<SearchPoint>{{"uniform_timestep", {{"uniform_timestep", true}}}};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/techniques/kernel/uniform_timestep.h"

namespace autooptim::runtime::techniques {

at::Tensor uniform_timesteps(const at::Tensor& t, const ForwardContext* fc) {
  if (!fc || !fc->options || !fc->options->of<UniformTimestepOptions>().on || t.dim() != 2 || t.size(1) < 1) return {};
  const at::Tensor first = t.select(1, 0);
  if (!t.eq(first.unsqueeze(1)).all().item<bool>()) return {};  // one host sync, as timestep_dedup's unique
  fc->count("kernel.uniform_timestep.samples", static_cast<double>(t.size(0)));
  fc->count("kernel.uniform_timestep.rows_saved", static_cast<double>(t.size(0) * (t.size(1) - 1)));
  return first.contiguous();
}

AUTOOPTIM_EXTENSIONS(uniform_timestep) {
  points.timesteps.add({"uniform_timestep", 10,
                        [](const RuntimeOptions& o) { return o.of<UniformTimestepOptions>().on; },
                        [](const at::Tensor& t, const ForwardContext* fc) -> std::optional<at::Tensor> {
                          at::Tensor u = uniform_timesteps(t, fc);
                          if (!u.defined()) return std::nullopt;
                          return u;
                        }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
