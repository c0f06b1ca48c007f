#include "gates/checks/authenticity.h"

#include <algorithm>

#include "base/strings.h"
#include "gates/checks/clip_work.h"
#include "gates/clip_frames.h"
#include "gates/robust_stats.h"
#include "runtime/techniques/engagement.h"
#include "runtime/techniques/registry.h"
#include "runtime/video_io.h"

namespace autooptim::gates {

using base::format_fixed;
using nlohmann::json;

namespace {

double sum(const std::vector<int64_t>& v) {
  double s = 0;
  for (int64_t x : v) s += static_cast<double>(x);
  return s;
}

// (a) Replayed output: a run that claims (or shows) skipped work yet made the baseline's clip bit for bit.
void replay_problems(const GateEvidence& ev, int64_t cand_N, std::vector<std::string>& problems) {
  const int64_t L = ev.work.num_layers;
  for (const auto& c : ev.clips) {
    const auto& t = c.run.trace;
    const double ran = t.get("transformer.forwards");
    const double density = t.has("sparse.attention.density") ? t.get("sparse.attention.density") : 1.0;
    const double blocks = sum(c.run.times.step_blocks);
    const bool claims_skips = (ran < cand_N) || t.get("cache.skipped_forwards") > 0 ||
                              t.get("cache.easycache.skipped_forwards") > 0 || density < 1.0 ||
                              blocks < static_cast<double>(cand_N * L);
    if (claims_skips && c.identical)
      problems.push_back(c.name + ": claims to have skipped work (" + format_fixed(ran, 0) + " of " +
                         std::to_string(cand_N) + " forwards run, " + format_fixed(blocks, 0) + " of " +
                         std::to_string(cand_N * L) + " blocks, attention density " + format_fixed(density, 3) +
                         ") yet its clip is bit-identical to the baseline's: skipped work cannot be that exact (the "
                         "baseline's output replayed, or the counters inflated)");
  }
}

// (b) Faster on prompts/seeds whose baseline output exists (the split at the official seed: cached, or
// made earlier in this process) than on the fresh ones drawn inside the timed windows.
json seen_vs_fresh(const GateTiming& t, double tol, std::vector<std::string>& problems) {
  const double factor = std::max(0.25, 1.0 - tol);
  double fresh = t.candidate.median, seen = median_of(t.candidate_split_s);
  json check = {{"fresh_s", fresh}, {"seen_s", seen}, {"factor", factor}};
  bool flagged = fresh > 0 && seen < fresh * factor;
  if (t.recheck_s) {  // the adjacent pair decides (see the gate run)
    const double f2 = t.recheck_s->first, s2 = t.recheck_s->second;
    check["recheck"] = {{"fresh_s", f2}, {"seen_s", s2}};
    flagged = f2 > 0 && s2 < f2 * factor;
    if (flagged) {
      seen = s2;
      fresh = f2;
    }
  }
  if (flagged)
    problems.push_back("the candidate is faster on prompts/seeds whose baseline output already exists (" +
                       format_fixed(seen, 3) +
                       " s at the official seed) than on fresh ones drawn inside the timed window (" +
                       format_fixed(fresh, 3) + " s): it depends on the baseline's outputs");
  return check;
}

// (e) Stages no technique works on must not be faster than the baseline's: text encoding unless a text
// switch is on, decoding unless a VAE switch is on (the registry's hooks say which techniques work where).
void stage_problems(const GateTiming& t, const runtime::RuntimeOptions& opts, double tol,
                    std::vector<std::string>& problems) {
  const bool decode_switches = runtime::techniques::works_on_decode(opts);
  const bool text_switches = runtime::techniques::works_on_text_encoding(opts);
  const double bt = t.baseline_text_s, ct = t.candidate_text_s, bd = t.baseline_decode_s, cd = t.candidate_decode_s;
  const double slack = 0.002 + 0.01 * t.baseline.median;
  if (!text_switches && ct < bt * std::max(0.25, 1.0 - tol) - slack)
    problems.push_back("text encoding took " + format_fixed(ct, 4) + " s against the baseline's " +
                       format_fixed(bt, 4) + " s, and no technique works on it: done before the timer?");
  if (!decode_switches && cd < bd * std::max(0.25, 1.0 - tol) - slack)
    problems.push_back("VAE decoding took " + format_fixed(cd, 4) + " s against the baseline's " + format_fixed(bd, 4) +
                       " s, and no technique works on it: done before the timer?");
}

// (g) The denoising loop ran the manifest's steps: a technique that runs fewer, with honest counters,
// leaves every other count consistent with what it did (docs/gate-defences.md, "fewer steps"); and
// (f) engagement: each switch that is on left its trace.
void step_and_engagement_problems(const GateEvidence& ev, const Manifest& cand, const runtime::RuntimeOptions& opts,
                                  std::vector<std::string>& problems) {
  for (const auto& c : ev.clips) {
    const size_t ran = c.run.times.step_seconds.size();
    if (ran != static_cast<size_t>(cand.config.steps))
      problems.push_back(c.name + ": the denoising loop ran " + std::to_string(ran) + " of the manifest's " +
                         std::to_string(cand.config.steps) + " steps");
  }
  for (const auto& c : ev.clips)
    for (const auto& p : runtime::engagement_problems(opts, c.run.trace)) problems.push_back(c.name + ": " + p);
}

}  // namespace

AuthenticityResult check_authenticity(const GateEvidence& ev, const Manifest& cand, const UntimedWork& untimed,
                                      const GateSettings& S, const TimedClocks& clocks) {
  AuthenticityResult result;
  GateCheck& g = result.check;
  g = {"authenticity", true, "", json::object()};
  const auto techs = technique_flags_set(cand);
  const auto opts = to_runtime_options(cand);
  const int64_t cand_N = cand.config.steps * (cand.config.guidance > 1.0 ? 2 : 1);
  // Timing comparisons within this gate: generous, as a run or two can be disturbed by the machine
  // (but a candidate 4x faster where it should not be is caught however noisy the machine is).
  const double tol = std::max(0.5, 3 * ev.timing.noise);
  std::vector<std::string> problems;
  replay_problems(ev, cand_N, problems);
  result.seen_vs_fresh = seen_vs_fresh(ev.timing, tol, problems);
  for (const auto& p : untimed.problems) problems.push_back(p);  // (c) work outside the timed windows
  for (const auto& p : clocks.problems) problems.push_back(p);   // ... and the windows' own clocks
  const ClipWorkAudit work = audit_clip_work(ev, cand, tol, S);  // (d) counters against measured work
  for (const auto& p : work.counter_problems) problems.push_back(p);
  stage_problems(ev.timing, opts, tol, problems);
  for (const auto& p : work.floor_problems) problems.push_back(p);
  step_and_engagement_problems(ev, cand, opts, problems);
  if (!techs.empty() && !cand.lossless && same_frames(ev.clips[0].cand8, runtime::frames_from_tensor(ev.off_run.video)))
    problems.push_back("a lossy technique whose output equals the off run's: it changed nothing");
  g.details = {{"technique_flags", techs},
               {"trace", ev.clips[0].run.trace.to_json()},
               {"work", work.work},
               {"untimed", untimed.report},
               {"clocks", clocks.report}};
  if (!work.cost.is_null()) g.details["cache_cost"] = work.cost;
  g.pass = problems.empty();
  g.reason = g.pass ? (techs.empty() ? "no technique flags (baseline or control)"
                                     : "engaged: counters consistent with the flags and the measured work")
                    : problems.front();
  g.details["problems"] = problems;
  return result;
}

}  // namespace autooptim::gates
