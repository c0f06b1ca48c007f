// The job queue: screens and gate runs of a list of manifests, sent to the workers one per worker at a
// time, each started only while the budgets (--budget-trials, --budget-minutes) allow it, with the part
// kept back for the held-out checks of the tier candidates.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "base/json_lines.h"
#include "base/stop_signals.h"
#include "base/strings.h"
#include "orchestrator/phases/phases.h"
#include "orchestrator/report.h"
#include "workers/messages.h"
#include "workers/trial_result.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {

std::pair<std::vector<GateRecord>, std::set<std::string>> tier_verdicts(const RunState& s) {
  std::pair<std::vector<GateRecord>, std::set<std::string>> vc;  // verdicts on the split, hashes confirmed held out
  for (const auto& [key, v] : s.done) {
    if (key.first.empty()) continue;
    if (key.second == s.req.split) vc.first.push_back(v);
    if (key.second == s.req.heldout_split) vc.second.insert(key.first);
  }
  return vc;
}

// Time kept back for the held-out checks: a tier needs its candidate confirmed on the held-out split,
// so while the gate and compose phases run, each current tier winner without a held-out verdict keeps
// one gate run's worth of the budget (the mean gate run so far, with a quarter for noise). Without it a
// short budget spends itself on candidates that cannot win and leaves the accepted one unconfirmed.
// The same for the gate-run budget (--budget-trials): each such winner keeps one gate run.
int64_t reserve_runs(const RunState& s) {
  const auto [verdicts, confirmed] = tier_verdicts(s);
  return heldout_pending(verdicts, confirmed);
}

double reserve_s(const RunState& s, int64_t workers) {
  if (s.gates_finished == 0) return 0.0;
  // A held-out gate runs more prompts than a gate on the split (the whole held-out split by default): it
  // is priced by its generations (warm-ups, timed pairs, audit, off run, each prompt's candidate and
  // baseline clips) against a split gate's.
  const auto runs = [&](int64_t np) {
    return 2.0 + 2.0 * s.gs.timing_repeats + 3.0 + 2.0 * static_cast<double>(np) - 1.0;
  };
  const double cost_ratio = std::max(1.0, runs(s.heldout_used) / runs(s.split_used));
  const auto [verdicts, confirmed] = tier_verdicts(s);
  return heldout_reserve_s(verdicts, confirmed, cost_ratio * s.gating_s / static_cast<double>(s.gates_finished),
                           workers);
}

std::string why_not_gate(const RunState& s, const Job& j, int64_t capacity) {
  const RunRequest& req = s.req;
  const bool reserves = j.phase != "heldout" && j.phase != "baseline";  // the held-out checks draw on the reserve
  const auto num = [](double v) { return base::format_fixed(v, 2); };
  if (base::StopSignals::signal()) return interrupted_by("before its gate run");
  if (s.gate_runs >= req.budget_trials)
    return "gate-run budget spent (" + std::to_string(req.budget_trials) + " of --budget-trials)";
  if (reserves && s.gate_runs + reserve_runs(s) >= req.budget_trials)
    return "gate-run budget spent (" + std::to_string(req.budget_trials) + " of --budget-trials; the rest, " +
           std::to_string(req.budget_trials - s.gate_runs) +
           ", is kept for the held-out checks of the tier candidates)";
  if (s.progress.left_s() <= 0) return "time budget spent (--budget-minutes " + num(req.budget_minutes) + ")";
  if (reserves && s.progress.left_s() <= reserve_s(s, capacity))
    return "time budget spent (--budget-minutes " + num(req.budget_minutes) + "; the rest, " +
           num(s.progress.left_s()) + " s, is kept for the held-out checks of the tier candidates)";
  return "";
}

json judge_screen(const RunState& s, const workers::Response& r) {
  // A screen that failed decides nothing: the gate will say why the candidate cannot run. A result is read as
  // the typed message (a missing or mistyped key is an error naming it, never a silent 0).
  json result = json{{"error", r.error}};
  if (r.ok) {
    try {
      result = workers::ScreenResult::from_json(r.result).to_json();
    } catch (const std::exception& e) {
      result = json{{"error", e.what()}};
    }
  }
  result["min_speedup"] = s.screen_min;
  result["slack"] = s.req.screen_slack;
  const json est = result.value("estimated_speedup", json());
  result["dropped"] = est.is_number() && est.get<double>() * (1.0 + s.req.screen_slack) < s.screen_min;
  return result;
}

namespace {

// The verdict on a candidate that could not even run, as the ledger and the report keep it: fewer keys than
// a gate's verdict (no timings, no integrity; the one failed check without details).
json could_not_run_row(const workers::GateVerdictResult& v) {
  const auto& artifacts = v.gates.at("artifacts");
  return {{"manifest", v.manifest},
          {"manifest_hash", v.manifest_hash},
          {"split", v.split},
          {"accepted", v.accepted},
          {"speedup", v.speedup},
          {"psnr", v.psnr},
          {"ssim", v.ssim},
          {"failure_signature", v.failure_signature},
          {"gates", {{"artifacts", {{"pass", artifacts.pass}, {"reason", artifacts.reason}}}}}};
}

}  // namespace

GateAnswer gate_answer(const Job& j, const workers::Response& r) {
  GateAnswer a;
  std::string error = r.error;
  if (r.ok) {
    try {
      a.verdict = workers::GateVerdictResult::from_json(r.result);
      a.row = a.verdict.to_json();
      a.ran = true;
      return a;
    } catch (const std::exception& e) {
      error = std::string("the worker's verdict is malformed: ") + e.what();
    }
  }
  a.verdict.manifest = j.m.id;
  a.verdict.manifest_hash = j.hash;
  a.verdict.split = j.split;
  a.verdict.failure_signature = "could-not-run";
  a.verdict.gates["artifacts"] = {false, error, json::object()};
  a.row = could_not_run_row(a.verdict);
  return a;
}

workers::Response response_of(const json& r, const std::string& id) {
  try {
    return workers::Response::from_json(r, "response to " + id);
  } catch (const std::exception& e) {
    workers::Response failed;
    failed.id = id;
    failed.worker = "?";
    failed.error = std::string("the worker's response is malformed: ") + e.what();
    return failed;
  }
}

namespace {

void submit(RunState& s, Job& j) {
  // A plugin's manifest is not screened: the screen times forwards in the worker's own process, where it never runs.
  if (j.screen && j.screen_result.is_null() && j.m.plugin.empty()) {
    ++s.screens;
    j.screening = true;
    workers::ScreenRequest screen;
    screen.base = s.base;
    screen.manifest = j.m;
    screen.forwards = s.req.screen_forwards;
    if (j.skip_ratio.is_number()) screen.skip_ratio = j.skip_ratio.get<double>();
    j.request = s.client->submit(screen.to_json());
    return;
  }
  ++s.gate_runs;
  j.screening = false;
  json settings = s.gate_settings;
  const auto& heldout = gates::heldout_splits();
  if (std::find(heldout.begin(), heldout.end(), j.split) != heldout.end())
    settings["max_prompts"] = s.req.heldout_max_prompts;
  workers::GateRequest gate;
  gate.manifest = j.m;
  gate.split = j.split;
  gate.out_dir = fs::absolute(s.out / "gates" / slug(j.m.id) / j.split).string();
  gate.settings = settings;
  gate.ledger = fs::absolute(s.out / "ledger.jsonl").string();
  if (const auto p = s.plugin_files.find(j.m.plugin); !j.m.plugin.empty() && p != s.plugin_files.end())
    gate.plugin = {p->second, s.req.agent_unsandboxed};
  j.request = s.client->submit(gate.to_json());
  s.progress.line("gate " + j.m.id + " on " + j.split + ": queued (" + j.phase + ")");
}

void finish_screen(RunState& s, Job& j, const workers::Response& r) {
  const auto num = [](double v) { return base::format_fixed(v, 2); };
  j.screen_result = judge_screen(s, r);
  s.screen_of[j.hash] = j.screen_result;
  const json est = j.screen_result.value("estimated_speedup", json());
  if (j.screen_result["dropped"].get<bool>()) {
    ++s.screened_out;
    s.not_gated[{j.hash, j.split}] = "screened out by stage timing: estimated at most " + num(est.get<double>()) +
                                     "x (with " + num(100 * s.req.screen_slack) +
                                     "% for noise), below the smallest tier's " + num(s.screen_min) +
                                     "x; no full clip was spent on it";
    s.progress.line("screen " + j.m.id + ": dropped (estimated " + num(est.get<double>()) + "x < " + num(s.screen_min) +
                    "x)");
    j.done = true;
  } else {
    s.progress.line("screen " + j.m.id + ": " +
                    (est.is_number() ? "estimated " + num(est.get<double>()) + "x" : std::string("not bounded")) +
                    ", gated");
  }
}

void finish_gate(RunState& s, Job& j, const workers::Response& r) {
  GateAnswer a = gate_answer(j, r);
  if (!a.ran) {
    // A candidate that cannot even run is rejected with the reason; the run goes on.
    json row = a.row;
    row["build"] = gates::Worker::build_id();
    s.ledger->append(row);
  }
  a.row["out_dir"] = (s.out / "gates" / slug(j.m.id) / j.split).string();
  a.row["worker"] = r.worker;
  j.verdict = GateRecord::read(a.row, "the verdict of " + j.m.id + " on " + j.split);
  j.done = true;
  s.done[{j.hash, j.split}] = *j.verdict;
  const workers::GateVerdictResult& v = a.verdict;
  if (v.accepted) s.best = std::max(s.best, v.speedup);
  std::string failed;
  for (const auto& [g, x] : v.gates)
    if (!x.pass && failed.empty()) failed = g + ": " + x.reason;
  if (j.m.kind == "baseline" && a.ran) {
    // Its own gate measures the denominator; "not faster than itself" is no rejection.
    s.progress.line("baseline measured on " + j.split + " (" + r.worker +
                    "): " + base::format_fixed(v.baseline_seconds, 2) + " s per clip");
    return;
  }
  s.progress.line("gate " + j.m.id + " on " + j.split + " (" + r.worker +
                  "): " + (v.accepted ? "ACCEPTED " : "rejected ") + base::format_fixed(v.speedup, 2) +
                  "x, worst PSNR " + quality_text(v.psnr, true) + (failed.empty() ? "" : " (" + failed + ")"));
}

// The answer `r` to j's request in flight.
void answered(RunState& s, Job& j, const workers::Response& r) {
  j.request.clear();
  const double busy = r.busy_s();  // 0 when a janitor answered for workers that died
  if (r.cancelled) {
    s.not_gated[{j.hash, j.split}] = interrupted_by("during its gate run");
    j.done = true;
    return;
  }
  if (j.screening) {
    j.screen_s += busy;
    s.screening_s += busy;
    s.device_s_of[j.hash].first += busy;
    finish_screen(s, j, r);
    return;
  }
  j.gate_s += busy;
  s.gating_s += busy;
  ++s.gates_finished;
  s.device_s_of[j.hash].second += busy;
  finish_gate(s, j, r);
}

// Starts what may start; false when nothing is pending or in flight (the queue is done).
bool dispatch(RunState& s, std::vector<Job>& jobs) {
  int64_t in_flight = 0, alive = 0;
  for (const auto& j : jobs) in_flight += !j.request.empty();
  for (const auto& w : s.client->workers()) alive += w.state == "ready" || w.state == "loading";
  const int64_t capacity = std::max<int64_t>(1, alive);
  bool pending = false;
  for (auto& j : jobs) {
    if (j.done || !j.request.empty()) continue;
    pending = true;
    if (in_flight >= capacity) continue;
    if (const std::string why = why_not_gate(s, j, capacity); !why.empty()) {
      s.not_gated[{j.hash, j.split}] = why;
      j.done = true;
      continue;
    }
    submit(s, j);
    ++in_flight;
  }
  return pending || in_flight > 0;
}

// Interrupted: the requests in flight are withdrawn and nobody waits for their answers.
void withdraw(RunState& s, std::vector<Job>& jobs) {
  s.launcher->no_restarts();
  for (auto& j : jobs)
    if (!j.request.empty()) {
      s.client->cancel(j.request);
      j.request.clear();
      s.not_gated[{j.hash, j.split}] = interrupted_by("during its gate run");
      j.done = true;
    }
}

// Dead workers' requests re-queued, deaths recorded; with every worker gone nothing more can run.
void janitor(RunState& s, std::vector<Job>& jobs) {
  s.client->requeue_dead();
  keep_workers(s);
  if (!s.launcher->all_gone()) return;
  for (auto& j : jobs)
    if (!j.done) {
      s.not_gated[{j.hash, j.split}] =
          "every worker died (" + s.launcher->last_log_line(s.launcher->worker_ids().front()) + ")";
      j.request.clear();
      j.done = true;
    }
}

}  // namespace

void run_jobs(RunState& s, std::vector<Job>& jobs) {
  for (auto& j : jobs) {
    j.hash = gates::manifest_hash(j.m);
    if (auto it = s.done.find({j.hash, j.split}); it != s.done.end()) j.verdict = it->second, j.done = true;
  }
  auto last_janitor = Clock::now();
  while (dispatch(s, jobs)) {
    for (auto& j : jobs) {
      if (j.request.empty()) continue;
      if (const auto r = s.client->poll(j.request)) answered(s, j, response_of(*r, j.request));
    }
    if (base::StopSignals::signal()) withdraw(s, jobs);
    if (std::chrono::duration<double>(Clock::now() - last_janitor).count() > 1.0) {
      last_janitor = Clock::now();
      janitor(s, jobs);
    }
    s.progress.show(jobs.front().phase, s.gate_runs, s.req.budget_trials, s.best, stage_line(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::optional<GateRecord> gate_one(RunState& s, const gates::Manifest& m, const std::string& split,
                                   const std::string& phase) {
  std::vector<Job> jobs(1);
  jobs[0].m = m;
  jobs[0].split = split;
  jobs[0].phase = phase;
  run_jobs(s, jobs);
  return jobs[0].verdict;
}

json skip_ratio_of(const RunState& s, const gates::Manifest& m) {
  const json want = gates::to_json(m)["flags"];
  for (const auto& e : s.executors) {
    for (const json& t : base::read_json_lines(s.out / "outbox" / e.value("family", "") / "trials.jsonl")) {
      try {
        const workers::TrialResult r = workers::TrialResult::from_json(t);
        if (r.skip_ratio < 0) continue;
        gates::Manifest tm = s.base;
        tm.id = s.base.model + "/trial";
        tm.kind = "patch";
        tm.family = m.family;
        tm.base = s.base.id;
        tm.flags = r.flags;
        if (gates::to_json(gates::parse_manifest(gates::to_json(tm), "trial"))["flags"] == want) return r.skip_ratio;
      } catch (const std::exception&) {
        // a row that is not a trial, or flags no longer valid: it measured nothing this candidate can use
      }
    }
  }
  return json();
}

void gate_candidates(RunState& s, std::vector<Candidate>& cs, const std::string& phase) {
  // Staged: each candidate is screened by stage timing first (a step cache with the skip ratio its
  // executor measured), then gated; the workers take them in parallel.
  std::vector<Job> jobs;
  for (const auto& c : cs) {
    Job j;
    j.m = c.m;
    j.split = s.req.split;
    j.phase = phase;
    j.screen = s.screen_min > 0;
    if (j.screen) j.skip_ratio = skip_ratio_of(s, c.m);
    jobs.push_back(std::move(j));
  }
  if (!jobs.empty()) run_jobs(s, jobs);
  for (size_t k = 0; k < cs.size(); ++k) cs[k].val = jobs[k].verdict;
}

}  // namespace autooptim::orchestrator
