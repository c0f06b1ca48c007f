#include "runtime/techniques/cache/cache_policy.h"

#include <cstdio>

#include "runtime/techniques/cache/easycache.h"
#include "runtime/techniques/cache/first_block_cache.h"
#include "runtime/techniques/cache/forced_skip.h"
#include "runtime/techniques/cache/magcache.h"
#include "runtime/techniques/cache/taylorseer.h"
#include "runtime/techniques/cache/teacache.h"

namespace autooptim::runtime::techniques {

CachePolicy::CachePolicy(std::string name, int64_t steps, Trace* trace)
    : name_(std::move(name)), steps_(steps), trace_(trace) {}

at::Tensor CachePolicy::forward(int64_t, int, const at::Tensor&, const std::function<at::Tensor()>& full) {
  return full();
}

at::Tensor CachePolicy::blocks(const BlockStack& s, const at::Tensor& h, int64_t, int) {
  return run_blocks(s, h, 0, s.layers);
}

void CachePolicy::decided(int64_t step, int branch, bool skipped) {
  decisions_.push_back({step, branch, skipped});
  if (!trace_) return;
  trace_->add("cache." + name_ + (skipped ? ".skipped_forwards" : ".computed_forwards"));
  trace_->add("cache.forwards");
  if (skipped) trace_->add("cache.skipped_forwards");
  trace_->define_ratio("cache.skip_ratio", "cache.skipped_forwards", "cache.forwards", 0.0);
}

void CachePolicy::record(const std::string& what, int branch, int64_t step, double v) {
  if (!trace_) return;
  char s[16];
  std::snprintf(s, sizeof s, "%04lld", static_cast<long long>(step));
  trace_->add("cache." + name_ + ".calibration." + what + "." + std::to_string(branch) + "." + s, v);
}

double relative_l1(const at::Tensor& now, const at::Tensor& before) {
  const double den = before.to(at::kFloat).abs().mean().item<double>();
  const double num = (now.to(at::kFloat) - before.to(at::kFloat)).abs().mean().item<double>();
  return den > 0 ? num / den : 1e9;
}

std::unique_ptr<CachePolicy> make_cache_policy(const RuntimeOptions& o, int64_t steps, Trace* trace) {
  if (o.of<EasyCacheOptions>().enabled) return std::make_unique<EasyCache>(o.of<EasyCacheOptions>(), steps, trace);
  if (o.of<TeaCacheOptions>().enabled || o.of<TeaCacheOptions>().calibrate)
    return std::make_unique<TeaCache>(o.of<TeaCacheOptions>(), steps, trace);
  if (o.of<MagCacheOptions>().enabled || o.of<MagCacheOptions>().calibrate)
    return std::make_unique<MagCache>(o.of<MagCacheOptions>(), steps, trace);
  if (o.of<FirstBlockCacheOptions>().enabled)
    return std::make_unique<FirstBlockCache>(o.of<FirstBlockCacheOptions>(), steps, trace);
  if (o.of<TaylorSeerOptions>().enabled) return std::make_unique<TaylorSeer>(o.of<TaylorSeerOptions>(), steps, trace);
  if (!o.of<ForcedSkipOptions>().steps.empty())
    return std::make_unique<ForcedSkip>(o.of<ForcedSkipOptions>(), steps, trace);
  return nullptr;
}

}  // namespace autooptim::runtime::techniques
