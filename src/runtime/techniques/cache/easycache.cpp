// Cache technique: EasyCache, a runtime-adaptive step cache over the whole transformer (see easycache.h).
#include <algorithm>
#include <cstdio>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/easycache_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(easycache) {
  Technique t;
  t.name = "easycache";
  t.family = "cache";
  t.lossless = false;
  t.summary =
      "EasyCache: both CFG branches reuse their last residual (order 0) or extrapolate it from their last two "
      "full computations (order 1) while the conditional branch's estimated output change stays under the threshold";
  t.group = "easycache";
  t.flags = always_written({
      bool_flag("enabled", field(&EasyCacheOptions::enabled), "turns the policy on"),
      number_flag("threshold", field(&EasyCacheOptions::threshold), 0.0, true, 1.0, false,
                  "accumulated relative-change budget before a full forward"),
      int_flag("warmup_steps", field(&EasyCacheOptions::warmup_steps), 1, 1000, "first steps always computed in full"),
      bool_flag("dense_last_step", field(&EasyCacheOptions::dense_last_step), "the last step always computed"),
  });
  // Written only when set: manifests from before it keep their canonical form and hash.
  t.flags.push_back(int_flag("order", field(&EasyCacheOptions::order), 0, 1,
                             "0: reuse the last residual; 1: extrapolate it from the last two full computations"));
  t.switch_flag = "easycache.enabled";
  t.exclusive_group = "step_cache";
  t.hooks = {"pipeline.transformer_call"};
  t.engagement = {{"cache.easycache.skipped_forwards", "easycache is on but no forward was skipped"}};
  // (order 1 forecasts need two full computations of the branch before a skip: after the warm-up always)
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    const double forwards = tr.get("transformer.forwards");
    if (tr.get("cache.easycache.skipped_forwards") > 0 && forwards > 0 &&
        tr.get("cache.easycache.computed_forwards") != forwards)
      out.push_back("easycache: computed forwards in its counters disagree with the transformer's");
  };
  t.warmup_steps = [](RuntimeOptions& o) -> int64_t& { return o.of<EasyCacheOptions>().warmup_steps; };
  t.dense_last_step = [](const RuntimeOptions& o) { return o.of<EasyCacheOptions>().dense_last_step; };
  t.search = [](const SearchContext& c) {
    // First-order forecasts (order 1) with a dense warm-up of the first 10% of the steps (5 of 50): on the
    // trained wan22-tiny they keep several dB more PSNR than reuse at the same threshold and skip more
    // (docs/journal/2026-12-04.md). Middle first: 0.15, 0.2, 0.1, ...
    const int64_t warmup = std::max<int64_t>(1, c.steps / 10);
    std::vector<SearchPoint> p;
    for (double th : {0.05, 0.1, 0.15, 0.2, 0.3}) {
      char label[40];
      std::snprintf(label, sizeof label, "easycache-o1-t%g", th);
      p.push_back({label,
                   {{"easycache",
                     {{"enabled", true},
                      {"threshold", th},
                      {"warmup_steps", warmup},
                      {"dense_last_step", true},
                      {"order", 1}}}}});
    }
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/cache/easycache.h"

namespace autooptim::runtime::techniques {
namespace {
double mean_abs(const at::Tensor& t) { return t.abs().mean().item<double>(); }
}  // namespace

EasyCache::EasyCache(const EasyCacheOptions& o, int64_t steps, Trace* trace)
    : CachePolicy("easycache", steps, trace), o_(o) {}

at::Tensor EasyCache::forward(int64_t step, int branch, const at::Tensor& x_in,
                              const std::function<at::Tensor()>& full) {
  const at::Tensor x = x_in.to(at::kFloat);
  if (branch == 0) {
    bool compute = step < o_.warmup_steps || (o_.dense_last_step && step == steps_ - 1) || k_ < 0 ||
                   !prev_x_.defined() || !residual_[0].defined();
    if (!compute) {
      const double out_norm = mean_abs(last_out_);
      acc_ += out_norm > 0 ? k_ * mean_abs(x - prev_x_) / out_norm : 1e9;
      compute = acc_ >= o_.threshold;
    }
    if (compute) acc_ = 0;
    compute_step_ = compute;
    prev_x_ = x;
  }
  // The unconditional branch follows the conditional one's decision, but needs its own residual.
  const bool compute = compute_step_ || !residual_[branch].defined();
  decided(step, branch, !compute);
  if (!compute) {
    if (o_.order >= 1 && before_[branch].defined() && at_[branch] > before_at_[branch]) {
      // The residual's slope per step between the last two full computations, carried on to this step.
      const double k = static_cast<double>(step - at_[branch]) / static_cast<double>(at_[branch] - before_at_[branch]);
      if (trace_) trace_->add("cache.easycache.forecasts");
      return x + residual_[branch] + k * (residual_[branch] - before_[branch]);
    }
    return x + residual_[branch];
  }
  const at::Tensor out = full().to(at::kFloat);
  before_[branch] = residual_[branch];
  before_at_[branch] = at_[branch];
  residual_[branch] = out - x;
  at_[branch] = step;
  if (branch == 0) {
    if (last_in_.defined()) {
      const double din = mean_abs(x - last_in_);
      k_ = din > 0 ? mean_abs(out - last_out_) / din : k_;
    }
    last_in_ = x;
    last_out_ = out;
  }
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
