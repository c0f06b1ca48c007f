// Kernel technique: the rotary tables kept on the device per latent grid (see rope_cache.h).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/rope_cache_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(rope_cache) {
  Technique t;
  t.name = "rope_cache";
  t.family = "kernel";
  t.lossless = true;
  t.summary =
      "the rotary cos/sin tables kept on the device per latent grid instead of rebuilt on the host each forward";
  t.flags = {bool_flag("rope_cache", field(&RopeCacheOptions::on), "rotary tables kept on the device per grid")};
  t.switch_flag = "rope_cache";
  t.hooks = {"transformer.rope_tables"};
  t.engagement = {{"kernel.rope_cache.hits", "rope_cache is on but no forward reused the kept rotary tables"}};
  // GPU only: what it saves is the host's work and the copy the device waits for (15 ms a forward at the
  // official shape); on the CPU the tables of a small grid cost microseconds, not worth a trial.
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"rope_cache", {{"rope_cache", true}}}} : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/forward_context.h"
#include "runtime/techniques/kernel/rope_cache.h"

namespace autooptim::runtime::techniques {

std::pair<at::Tensor, at::Tensor> rope_tables(const ForwardContext* fc, RopeTables& store, int64_t f, int64_t h,
                                              int64_t w,
                                              const std::function<std::pair<at::Tensor, at::Tensor>()>& compute) {
  if (!fc || !fc->options || !fc->options->of<RopeCacheOptions>().on) return compute();
  const std::array<int64_t, 3> key{f, h, w};
  if (auto hit = store.find(key); hit != store.end()) {
    fc->count("kernel.rope_cache.hits");
    return hit->second;
  }
  if (store.size() >= 8) store.clear();  // a handful of grids at most; a new one evicts them all
  auto tables = compute();
  store[key] = tables;
  fc->count("kernel.rope_cache.misses");
  return tables;
}

AUTOOPTIM_EXTENSIONS(rope_cache) {
  points.rope_tables.add({"rope_cache", 10, [](const RuntimeOptions& o) { return o.of<RopeCacheOptions>().on; },
                          [](TechniqueState& state, int64_t f, int64_t h, int64_t w,
                             const std::function<std::pair<at::Tensor, at::Tensor>()>& compute,
                             const ForwardContext* fc) -> std::optional<std::pair<at::Tensor, at::Tensor>> {
                            return rope_tables(fc, state.get<RopeTables>("rope_cache"), f, h, w, compute);
                          }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
