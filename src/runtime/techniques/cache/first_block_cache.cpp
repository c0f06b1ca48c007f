// Cache technique: first-block cache, per CFG branch (see first_block_cache.h).
#include <algorithm>
#include <cstdio>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/first_block_cache_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(first_block_cache) {
  Technique t;
  t.name = "first_block_cache";
  t.family = "cache";
  t.lossless = false;
  t.summary =
      "first-block cache: block 0 always runs; while its residual stays close to the one of the last full "
      "computation, blocks 1..N-1 reuse their cached residual (per CFG branch)";
  t.group = "first_block_cache";
  t.flags = {
      bool_flag("enabled", field(&FirstBlockCacheOptions::enabled), "turns the policy on"),
      number_flag("threshold", field(&FirstBlockCacheOptions::threshold), 0.0, true, 10.0, false,
                  "relative L1 change of block 0's residual under which the other blocks are skipped"),
      int_flag("warmup_steps", field(&FirstBlockCacheOptions::warmup_steps), 0, 1000, "first steps always computed"),
      bool_flag("dense_last_step", field(&FirstBlockCacheOptions::dense_last_step), "the last step always computed"),
  };
  t.switch_flag = "first_block_cache.enabled";
  t.exclusive_group = "step_cache";
  t.hooks = {"transformer.blocks"};
  t.engagement = {
      {"cache.first_block_cache.skipped_forwards", "first_block_cache is on but no block stack was skipped"}};
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    const double decided =
        tr.get("cache.first_block_cache.computed_forwards") + tr.get("cache.first_block_cache.skipped_forwards");
    if (decided != tr.get("transformer.forwards"))
      out.push_back("first_block_cache: its computed and skipped forwards disagree with the transformer's forwards");
  };
  t.warmup_steps = [](RuntimeOptions& o) -> int64_t& { return o.of<FirstBlockCacheOptions>().warmup_steps; };
  t.dense_last_step = [](const RuntimeOptions& o) { return o.of<FirstBlockCacheOptions>().dense_last_step; };
  t.search = [](const SearchContext& c) {
    const int64_t warmup = std::max<int64_t>(1, c.steps / 10);
    std::vector<SearchPoint> p;
    for (double th : {0.05, 0.1, 0.2}) {
      char label[40];
      std::snprintf(label, sizeof label, "first_block_cache-t%g", th);
      p.push_back({label, {{"first_block_cache", {{"enabled", true}, {"threshold", th}, {"warmup_steps", warmup}}}}});
    }
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/cache/first_block_cache.h"

namespace autooptim::runtime::techniques {

FirstBlockCache::FirstBlockCache(const FirstBlockCacheOptions& o, int64_t steps, Trace* trace)
    : CachePolicy("first_block_cache", steps, trace), o_(o) {}

at::Tensor FirstBlockCache::blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) {
  Branch& b = branch_[branch];
  const at::Tensor h1 = s.block(0, h);
  const at::Tensor first = h1.to(at::kFloat) - h.to(at::kFloat);
  bool compute =
      step < o_.warmup_steps || (o_.dense_last_step && last_step(step)) || !b.rest_residual.defined() || s.layers < 2;
  if (!compute) compute = relative_l1(first, b.first_residual) >= o_.threshold;
  decided(step, branch, !compute);
  if (!compute) return (h1.to(at::kFloat) + b.rest_residual).to(h.scalar_type());
  const at::Tensor out = run_blocks(s, h1, 1, s.layers);
  b.first_residual = first;
  b.rest_residual = out.to(at::kFloat) - h1.to(at::kFloat);
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
