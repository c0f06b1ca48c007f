#include "gates/gate_plan.h"

#include <algorithm>

namespace autooptim::gates {

namespace {

std::string official(const std::string& id) { return id + " @ official seed"; }

bool is_cached(const std::vector<bool>& cached, size_t i) { return i < cached.size() && cached[i]; }

}  // namespace

std::vector<PlannedGeneration> plan_gate_generations(const std::vector<std::string>& ids, const GateSettings& S,
                                                     const std::vector<bool>& cached, bool baseline_gate) {
  std::vector<PlannedGeneration> plan;
  auto add = [&](std::string role, std::string side, std::string prompt, std::string serves) {
    PlannedGeneration g;
    g.role = std::move(role);
    g.side = std::move(side);
    g.prompt = std::move(prompt);
    g.serves = std::move(serves);
    plan.push_back(std::move(g));
    return &plan.back();  // used before the next generation is added
  };
  add("warmup_baseline", "baseline", "drawn",
      "steady state before timing (allocations, kernel choice, graphs at the shape, one decode); the thread count "
      "later windows may not exceed")
      ->steps = std::max<int64_t>(0, S.warmup_steps);
  add("warmup_candidate", "candidate", "drawn", "the candidate's steady state (its one-time costs untimed)")->steps =
      std::max<int64_t>(0, S.warmup_steps);
  // One pair where the machine's noise is measured otherwise (GateSettings::pairs_from_history): the baseline's
  // own gate by its timed split clips, a candidate's gate after it in the worker process by the baseline's runs
  // there, where its one baseline run agrees with them.
  const int64_t R = std::max<int64_t>(1, S.timing_repeats), least = std::max<int64_t>(1, S.min_timing_repeats);
  const bool one_pair = baseline_gate ? split_times_the_noise(S, ids.size()) : S.pairs_from_history;
  const int64_t quiet = one_pair ? 1 : least;
  for (int64_t i = 1; i <= R; ++i) {
    const std::string when = i > least   ? " (only while the pairs so far are not quiet)"
                             : i > quiet ? " (only where the worker's earlier gates did not measure the noise)"
                                         : "";
    add("candidate", "candidate", "drawn",
        "timed pair " + std::to_string(i) + when +
            ": the speedup and its noise; an unannounced quality audit (a prompt and seed nothing before the timer "
            "knew)")
        ->conditional = i > quiet;
    add("baseline", "baseline", "pair " + std::to_string(i) + "'s",
        "timed pair " + std::to_string(i) + when +
            ": the baseline's time next to a calibration; the audit clip's reference")
        ->conditional = i > quiet;
  }
  // The off run right after the pairs, whose last run is the baseline's: its time is compared with theirs, in
  // the same state (after the candidate's runs, a flags-off run measured up to 1.2x slower on a CPU).
  if (!ids.empty() && !baseline_gate) {  // the baseline has no flag to turn off
    if (is_cached(cached, 0))
      add("baseline_check", "baseline", official(ids.front()),
          "only in a worker process's first gate on this cached output (a later one trusts the file it verified, "
          "unchanged since): the fresh spot-check that keeps the cache honest; one more baseline time")
          ->conditional = true;
    add("off", "off", official(ids.front()),
        "off identity: the build with the flags off makes the baseline's output (cached or fresh) at its speed");
  }
  for (const auto& id : ids)
    add("candidate_split", "candidate", official(id),
        baseline_gate
            ? "the baseline's output of " + id + ", cached for every later gate (checked against a cached one)"
            : "the quality gate's clip; its time against the fresh draws (a candidate that depends on the "
              "baseline's outputs)");
  add("audit", "candidate", "pair 1 again",
      "the duplicate-prompt audit: the same request must cost the same and give the same clip");
  if (ids.empty()) return plan;
  for (size_t i = 0; i < ids.size() && !baseline_gate; ++i) {
    PlannedGeneration* g =
        add("baseline_split", "baseline", official(ids[i]), "the reference of the quality gate's clip of " + ids[i]);
    g->cacheable = true;
    g->cached = is_cached(cached, i);
  }
  add("recheck_fresh", "candidate", "drawn",
      "only when the split and the pairs disagree by half: the adjacent pair that tells a cheat from a load spike")
      ->conditional = true;
  if (!ids.empty())
    add("recheck_seen", "candidate", official(ids.front()), "the other half of that pair")->conditional = true;
  add("precision_control", "baseline", "a split clip",
      "only for a lossless candidate's clips that are not bit-identical: the baseline one precision up")
      ->conditional = true;
  return plan;
}

bool split_times_the_noise(const GateSettings& S, size_t prompts) { return S.pairs_from_history && prompts >= 2; }

int64_t generations_made(const std::vector<PlannedGeneration>& plan) {
  return std::count_if(plan.begin(), plan.end(),
                       [](const PlannedGeneration& g) { return !g.conditional && !g.cached; });
}

double planned_seconds(const PlannedGeneration& g, const ClipCost& c, double candidate_speedup) {
  if (g.cached || g.conditional) return 0.0;
  double s = c.clip_s;
  if (g.steps > 0 && g.steps < c.steps) s -= static_cast<double>(c.steps - g.steps) * c.step_s;
  return g.side == "candidate" ? s / std::max(1e-9, candidate_speedup) : s;
}

}  // namespace autooptim::gates
