// Cache technique: MagCache-style block cache with a calibrated magnitude-ratio schedule (see magcache.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/magcache_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(magcache) {
  Technique t;
  t.name = "magcache";
  t.family = "cache";
  t.lossless = false;
  t.summary =
      "MagCache-style: a calibrated magnitude-ratio schedule bounds the error of reusing each CFG "
      "branch's cached block-stack residual";
  t.group = "magcache";
  t.flags = {
      bool_flag("enabled", field(&MagCacheOptions::enabled), "turns the policy on"),
      number_flag("threshold", field(&MagCacheOptions::threshold), 0.0, true, 10.0, false,
                  "accumulated error budget while skipping"),
      int_flag("max_skips", field(&MagCacheOptions::max_skips), 1, 1000, "consecutive skips at most"),
      int_flag("warmup_steps", field(&MagCacheOptions::warmup_steps), 0, 1000, "first steps always computed"),
      bool_flag("dense_last_step", field(&MagCacheOptions::dense_last_step), "the last step always computed"),
      number_list_flag("ratios", field(&MagCacheOptions::ratios), 0.0, 100.0, 1000,
                       "calibrated magnitude ratio per step, conditional branch"),
      number_list_flag("ratios_uncond", field(&MagCacheOptions::ratios_uncond), 0.0, 100.0, 1000,
                       "calibrated magnitude ratio per step, unconditional branch (empty: the conditional's)"),
      bool_flag("calibrate", field(&MagCacheOptions::calibrate), "compute every step and record the ratios"),
  };
  t.switch_flag = "magcache.enabled";
  t.exclusive_group = "step_cache";
  t.hooks = {"transformer.blocks"};
  t.engagement = {{"cache.magcache.skipped_forwards", "magcache is on but no block stack was skipped"}};
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    const double decided = tr.get("cache.magcache.computed_forwards") + tr.get("cache.magcache.skipped_forwards");
    if (decided != tr.get("transformer.forwards"))
      out.push_back("magcache: its computed and skipped forwards disagree with the transformer's forwards");
  };
  t.check_flags = [](const RuntimeOptions& o) -> std::optional<FlagProblem> {
    if (o.of<MagCacheOptions>().enabled && !o.of<MagCacheOptions>().calibrate && o.of<MagCacheOptions>().ratios.empty())
      return FlagProblem{".ratios", "magcache needs its calibrated magnitude-ratio schedule (run its calibration)"};
    return std::nullopt;
  };
  t.calibration = Calibration{
      {{"magcache", {{"calibrate", true}}}}, [](const std::vector<Trace>& traces) {
        // Per branch and step, the mean ratio over the calibration runs.
        std::map<std::pair<int, int64_t>, std::pair<double, int>> sum;
        const std::string prefix = "cache.magcache.calibration.ratio.";
        int64_t steps = 0;
        for (const auto& tr : traces)
          for (const auto& [key, v] : tr.counters())
            if (key.rfind(prefix, 0) == 0) {
              const int branch = key[prefix.size()] - '0';
              const int64_t step = std::stoll(key.substr(prefix.size() + 2));
              auto& s = sum[{branch, step}];
              s.first += v, s.second += 1;
              steps = std::max(steps, step + 1);
            }
        std::vector<double> ratios[2];
        for (int b = 0; b < 2; ++b) {
          const bool measured = std::any_of(sum.begin(), sum.end(), [b](const auto& s) { return s.first.first == b; });
          for (int64_t i = 0; i < steps && measured; ++i) {
            auto it = sum.find({b, i});
            ratios[b].push_back(it == sum.end() ? 1.0 : it->second.first / it->second.second);  // step 0: no previous
          }
        }
        return nlohmann::json{{"magcache", {{"ratios", ratios[0]}, {"ratios_uncond", ratios[1]}}}};
      }};
  t.warmup_steps = [](RuntimeOptions& o) -> int64_t& { return o.of<MagCacheOptions>().warmup_steps; };
  t.dense_last_step = [](const RuntimeOptions& o) { return o.of<MagCacheOptions>().dense_last_step; };
  t.search = [](const SearchContext& c) {
    // MagCache keeps the first 20% of the steps dense.
    const int64_t warmup = std::max<int64_t>(1, c.steps / 5);
    std::vector<SearchPoint> p;
    for (double th : {0.06, 0.12, 0.24}) {
      char label[32];
      std::snprintf(label, sizeof label, "magcache-t%g", th);
      p.push_back(
          {label, {{"magcache", {{"enabled", true}, {"threshold", th}, {"max_skips", 2}, {"warmup_steps", warmup}}}}});
    }
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/cache/magcache.h"

namespace autooptim::runtime::techniques {

MagCache::MagCache(const MagCacheOptions& o, int64_t steps, Trace* trace)
    : CachePolicy("magcache", steps, trace), o_(o) {}

double MagCache::ratio(int branch, int64_t step) const {
  const auto& r = branch == 1 && !o_.ratios_uncond.empty() ? o_.ratios_uncond : o_.ratios;
  if (r.empty()) return 1.0;
  const int64_t n = static_cast<int64_t>(r.size());
  if (n == steps_) return r[static_cast<size_t>(step)];
  const double pos = steps_ > 1 ? static_cast<double>(step) * (n - 1) / (steps_ - 1) : 0.0;
  return r[static_cast<size_t>(std::clamp<int64_t>(std::llround(pos), 0, n - 1))];
}

at::Tensor MagCache::blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) {
  Branch& b = branch_[branch];
  bool compute =
      o_.calibrate || step < o_.warmup_steps || (o_.dense_last_step && last_step(step)) || !b.residual.defined();
  if (!compute) {
    b.gamma *= ratio(branch, step);
    b.err += std::abs(1.0 - b.gamma);
    b.skips += 1;
    compute = !(b.err < o_.threshold && b.skips <= o_.max_skips);
  }
  decided(step, branch, !compute);
  if (!compute) return (h.to(at::kFloat) + b.residual).to(h.scalar_type());
  const at::Tensor out = run_blocks(s, h, 0, s.layers);
  const at::Tensor residual = out.to(at::kFloat) - h.to(at::kFloat);
  if (o_.calibrate && b.residual.defined()) {
    // Per token: |residual_t| / |residual_t-1| over the channels, then the mean over tokens.
    const at::Tensor r = residual.norm(2, -1) / b.residual.norm(2, -1).clamp_min(1e-12);
    record("ratio", branch, step, r.mean().item<double>());
  }
  b.residual = residual;
  b.gamma = 1, b.err = 0, b.skips = 0;
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
