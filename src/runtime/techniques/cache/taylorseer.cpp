// Cache technique: TaylorSeer, a fixed-schedule step cache with Taylor-series forecasts (see taylorseer.h).
#include <algorithm>
#include <cstdio>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/taylorseer_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(taylorseer) {
  Technique t;
  t.name = "taylorseer";
  t.family = "cache";
  t.lossless = false;
  t.summary =
      "TaylorSeer: after the warm-up a full forward every `interval` steps; in between both CFG branches forecast "
      "their residual by a Taylor series (order 0-2) from their last full computations";
  t.group = "taylorseer";
  t.flags = {
      bool_flag("enabled", field(&TaylorSeerOptions::enabled), "turns the policy on"),
      int_flag("interval", field(&TaylorSeerOptions::interval), 2, 50,
               "a full computation every `interval` steps after the warm-up"),
      int_flag("order", field(&TaylorSeerOptions::order), 0, 2,
               "0: reuse the last residual; 1: linear forecast from the last two full computations; 2: quadratic from "
               "three"),
      int_flag("warmup_steps", field(&TaylorSeerOptions::warmup_steps), 0, 1000, "first steps always computed in full"),
      bool_flag("dense_last_step", field(&TaylorSeerOptions::dense_last_step), "the last step always computed"),
  };
  t.switch_flag = "taylorseer.enabled";
  t.exclusive_group = "step_cache";
  t.hooks = {"pipeline.transformer_call"};
  t.engagement = {{"cache.taylorseer.skipped_forwards", "taylorseer is on but no forward was skipped"}};
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    if (tr.get("cache.taylorseer.computed_forwards") != tr.get("transformer.forwards"))
      out.push_back("taylorseer: computed forwards in its counters disagree with the transformer's");
  };
  t.fixed_schedule = true;
  t.warmup_steps = [](RuntimeOptions& o) -> int64_t& { return o.of<TaylorSeerOptions>().warmup_steps; };
  t.dense_last_step = [](const RuntimeOptions& o) { return o.of<TaylorSeerOptions>().dense_last_step; };
  t.search = [](const SearchContext& c) {
    // First-order forecasts after a dense warm-up of a tenth of the steps, as EasyCache's search; the interval
    // sets the forward-skip ratio (about 1 - 1/n after the warm-up). On the trained wan22-tiny n2-n6 passed
    // every gate, n8 failed the visual gate, and order 2 lost dB against order 1 (docs/journal/2026-12-04.md,
    // evening). Middle first: n4, n6, n3, n8, n2.
    const int64_t warmup = std::max<int64_t>(1, c.steps / 10);
    std::vector<SearchPoint> p;
    for (int64_t n : {2, 3, 4, 6, 8}) {
      char label[40];
      std::snprintf(label, sizeof label, "taylorseer-o1-n%lld", static_cast<long long>(n));
      p.push_back({label,
                   {{"taylorseer",
                     {{"enabled", true},
                      {"interval", n},
                      {"order", 1},
                      {"warmup_steps", warmup},
                      {"dense_last_step", true}}}}});
    }
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/cache/taylorseer.h"

namespace autooptim::runtime::techniques {

TaylorSeer::TaylorSeer(const TaylorSeerOptions& o, int64_t steps, Trace* trace)
    : CachePolicy("taylorseer", steps, trace), o_(o) {}

bool TaylorSeer::scheduled(int64_t step) const {
  // (an interval under 2, which manifests refuse, computes every step)
  return step < o_.warmup_steps || (o_.dense_last_step && last_step(step)) || o_.interval < 2 ||
         (step - o_.warmup_steps) % o_.interval == 0;
}

at::Tensor TaylorSeer::forward(int64_t step, int branch, const at::Tensor& x_in,
                               const std::function<at::Tensor()>& full) {
  const at::Tensor x = x_in.to(at::kFloat);
  Forecast& f = f_[branch];
  const bool compute = scheduled(step) || !f.r.defined();
  decided(step, branch, !compute);
  if (!compute) {
    if (!f.d1.defined()) return x + f.r;
    if (trace_) trace_->add("cache.taylorseer.forecasts");
    const double h = static_cast<double>(step - f.t[0]);
    at::Tensor r = f.r + h * f.d1;
    if (f.d2.defined()) r = r + h * static_cast<double>(step - f.t[1]) * f.d2;
    return x + r;
  }
  const at::Tensor out = full().to(at::kFloat);
  const at::Tensor r = out - x;
  // Divided differences against the previous computations, as far as the order and their number allow:
  // fewer computations give a lower-order forecast.
  at::Tensor d1, d2;
  if (o_.order >= 1 && f.r.defined()) d1 = (r - f.r) / static_cast<double>(step - f.t[0]);
  if (o_.order >= 2 && d1.defined() && f.d1.defined()) d2 = (d1 - f.d1) / static_cast<double>(step - f.t[1]);
  f.r = r;
  f.d1 = d1;
  f.d2 = d2;
  f.t[1] = f.t[0];
  f.t[0] = step;
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
