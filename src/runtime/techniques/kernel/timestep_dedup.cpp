// Kernel technique: the time embedding computed once per distinct timestep value.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(timestep_dedup) {
  Technique t;
  t.name = "timestep_dedup";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "the time embedding computed once per distinct timestep value, gathered back per token";
  t.flags = always_written(
      {bool_flag("timestep_dedup", field(&TimestepDedupOptions::on), "time embedding once per distinct timestep")});
  t.switch_flag = "timestep_dedup";
  t.hooks = {"transformer.time_embedding"};
  t.engagement = {{"kernel.timestep_dedup.rows_saved", "timestep_dedup is on but no time-embedding row was saved"}};
  t.search = [](const SearchContext&) {
    return std::vector<SearchPoint>{{"timestep_dedup", {{"timestep_dedup", true}}}};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/techniques/kernel/timestep_dedup.h"

namespace autooptim::runtime::techniques {

std::pair<at::Tensor, at::Tensor> dedup_time_embedding(
    const at::Tensor& t, const std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor&)>& embed,
    const ForwardContext* fc) {
  // unique values [U] and, per row, the index of its value [N]
  auto [values, inverse, counts] = at::_unique2(t, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
  auto [a, b] = embed(values);
  if (fc) fc->count("kernel.timestep_dedup.rows_saved", static_cast<double>(t.numel() - values.numel()));
  return {a.index_select(0, inverse.reshape({-1})), b.index_select(0, inverse.reshape({-1}))};
}

AUTOOPTIM_EXTENSIONS(timestep_dedup) {
  points.time_embedding.add({"timestep_dedup", 10,
                             [](const RuntimeOptions& o) { return o.of<TimestepDedupOptions>().on; },
                             [](const at::Tensor& t, const std::function<ext::TimeEmbedding(const at::Tensor&)>& embed,
                                const ForwardContext* fc) -> std::optional<ext::TimeEmbedding> {
                               return dedup_time_embedding(t, embed, fc);
                             }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
