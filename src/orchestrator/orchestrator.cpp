#include "orchestrator/orchestrator.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/stop_signals.h"
#include "base/strings.h"
#include "orchestrator/phases/phases.h"

using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

using base::join;

}  // namespace

void validate(const RunRequest& req) {
  auto fail = [](const std::string& what) { throw Error(what); };
  if (req.out_dir.empty()) fail("--out must name a folder");
  if (req.budget_trials < 1) fail("--budget-trials must be at least 1, got " + std::to_string(req.budget_trials));
  if (!(req.budget_minutes > 0) || !std::isfinite(req.budget_minutes) || req.budget_minutes > 60.0 * 24 * 365)
    fail("--budget-minutes must be a positive number of minutes (at most a year), got " +
         std::to_string(req.budget_minutes));
  if (req.executor_trials < 1) fail("--executor-trials must be at least 1, got " + std::to_string(req.executor_trials));
  if (!contains(gates::visible_splits(), req.split))
    fail("--split '" + req.split + "': candidates are gated on a visible split (" + join(gates::visible_splits()) +
         "); the held-out splits only check the tier candidates (--heldout-split)");
  if (!contains(gates::heldout_splits(), req.heldout_split))
    fail("--heldout-split '" + req.heldout_split + "' is not a held-out split (" + join(gates::heldout_splits()) + ")");
  const auto& g = req.gate;
  if (g.timing_repeats < 1 || g.timing_repeats > 1000)
    fail("--repeats must be in [1, 1000], got " + std::to_string(g.timing_repeats));
  if (g.max_prompts < 0) fail("--max-prompts must be 0 (all) or positive, got " + std::to_string(g.max_prompts));
  if (!std::isfinite(g.min_psnr) || g.min_psnr < 0 || g.min_psnr > 200)
    fail("--min-psnr must be a finite number of dB in [0, 200], got " + std::to_string(g.min_psnr));
  if (!std::isfinite(g.min_ssim) || g.min_ssim < 0 || g.min_ssim > 1)
    fail("--min-ssim must be in [0, 1], got " + std::to_string(g.min_ssim));
  if (req.frames && (req.frames < 1 || req.frames > 100001 || req.frames % 4 != 1))
    fail("--frames " + std::to_string(req.frames) + " is not of the form 4k+1 in [1, 100001]");
  if (req.steps && (req.steps < 1 || req.steps > 1000))
    fail("--steps must be in [1, 1000], got " + std::to_string(req.steps));
  const int64_t multiple = models::model_facts(req.load.model).pixel_multiple;
  for (auto [name, v] : {std::pair<const char*, int64_t>{"--height", req.height}, {"--width", req.width}})
    if (v && (v < multiple || v > 16384 || v % multiple))
      fail(std::string(name) + " " + std::to_string(v) + " is not a multiple of " + std::to_string(multiple) + " in [" +
           std::to_string(multiple) + ", 16384] (" + req.load.model + ")");
}

int64_t heldout_pending(const std::vector<GateRecord>& verdicts, const std::set<std::string>& confirmed) {
  std::set<std::string> winners;
  for (const auto& [bucket, need] : tier_buckets()) {
    const GateRecord* win = nullptr;
    for (const auto& v : verdicts)
      if (v.accepted && v.speedup >= need && (!win || ranks_above(v, *win))) win = &v;
    if (win && !confirmed.count(win->manifest_hash)) winners.insert(win->manifest_hash);
  }
  return static_cast<int64_t>(winners.size());
}

double heldout_reserve_s(const std::vector<GateRecord>& verdicts, const std::set<std::string>& confirmed,
                         double per_gate_s, int64_t workers) {
  if (per_gate_s <= 0 || workers < 1) return 0.0;
  return 1.25 * per_gate_s *
         std::ceil(static_cast<double>(heldout_pending(verdicts, confirmed)) / static_cast<double>(workers));
}

RunOutcome judge_run(const json& r, const std::string& fail_if_no_tier) {
  RunOutcome o;
  if (r.contains("interrupted") && r["interrupted"].is_object()) {
    o.signal = r["interrupted"].value("signal", 0);
    o.exit_code = 128 + o.signal;
    o.problems.push_back(std::string("interrupted by ") + signal_name(o.signal) +
                         ": the report covers what was done; continue with --resume");
    return o;
  }
  // Executors: all failed is a run that explored nothing; some failed is worth a warning.
  int started = 0, failed = 0;
  std::string failures;
  for (const auto& e : r.value("executors", json::array())) {
    if (e.value("state", "") == "skipped") continue;
    ++started;
    if (e.value("state", "") == "failed") {
      ++failed;
      failures += std::string(failures.empty() ? "" : "; ") + e.value("family", "?") + ": " + e.value("reason", "");
    }
  }
  if (started > 0 && failed == started)
    o.problems.push_back("every executor failed (" + failures + ")");
  else if (failed > 0)
    o.warnings.push_back(std::to_string(failed) + " of " + std::to_string(started) + " executors failed (" + failures +
                         ")");
  for (const auto& a : r.value("agents", json::array())) {
    const std::string name = a.value("name", "agent");
    if (a.value("sandbox", "").rfind("none", 0) == 0)
      o.warnings.push_back(name + " ran WITHOUT a sandbox (--agent-unsandboxed): nothing kept it from the run's files");
    if (a.value("blocked_count", 0) > 0)
      o.warnings.push_back(name + ": " + std::to_string(a.value("blocked_count", 0)) +
                           " action(s) blocked (the report's agents section names each)");
  }
  const json& b = r.value("baseline", json::object());
  if (!(b.value("seconds", 0.0) > 0))
    o.problems.push_back("the baseline was not measured" +
                         (b.value("reason", "").empty() ? std::string() : ": " + b.value("reason", "")));
  int gated = 0, total = 0;
  for (const auto& c : r.value("candidates", json::array())) {
    ++total;
    gated += c.value("gated", false) || c.value("screened_out", false);
  }
  int cut_short = 0;
  for (const auto& e : r.value("executors", json::array()))
    cut_short += e.value("state", "") == "stopped" || e.value("state", "") == "killed";
  if (total == 0)
    o.problems.push_back("no candidate to gate: the executors proposed nothing" +
                         (cut_short ? " (" + std::to_string(cut_short) +
                                          " stopped at the exploration deadline, half of what --budget-minutes left "
                                          "after the baseline's gate: "
                                          "give them more time)"
                                    : std::string()));
  else if (gated == 0)
    o.problems.push_back("none of the " + std::to_string(total) + " candidates was gated (" +
                         r.value("budget_note", std::string("budget spent")) + ")");
  if (!o.problems.empty()) {
    o.exit_code = 2;
    return o;
  }
  if (!fail_if_no_tier.empty()) {
    const json& tiers = r.value("tiers", json::object());
    bool any = false;
    for (const auto& [k, t] : tiers.items()) any = any || !t.is_null();
    if (fail_if_no_tier == "any" && !any)
      o.problems.push_back("--fail-if-no-tier: no tier was reached");
    else if (fail_if_no_tier != "any" && (!tiers.contains(fail_if_no_tier) || tiers[fail_if_no_tier].is_null()))
      o.problems.push_back("--fail-if-no-tier " + fail_if_no_tier + ": that tier was not reached");
    if (!o.problems.empty()) {
      for (const auto& n : r.value("tier_notes", json::object())
                               .value(fail_if_no_tier == "any" ? "1.5x" : fail_if_no_tier, json::array()))
        o.problems.back() += "; " + n.get<std::string>();
      o.exit_code = 1;
    }
  }
  return o;
}

RunOutcome run(const RunRequest& req) {
  // Everything that can be checked is checked before the run folder is touched: a failed start
  // must leave nothing that makes the corrected retry look like a second run.
  validate(req);
  gates::Manifest baseline = run_baseline(req);
  gates::PromptSet prompts = gates::load_prompts(req.prompts_dir, true);  // the held-out pin checked here
  RunState s(req, std::move(baseline), std::move(prompts));
  check_inputs(s);
  const base::StopSignals signals;
  if (req.plan) return plan_run(s);

  open_run(s);
  prepare_gating(s);
  baseline_phase(s);
  explore_phase(s);
  collect_candidates(s);
  gate_and_compose(s);
  choose_tiers(s, [&s](const Candidate& c) { return gate_one(s, c.m, s.req.heldout_split, "heldout"); });
  deploy_phase(s);
  return finish_report(s);
}

}  // namespace autooptim::orchestrator
