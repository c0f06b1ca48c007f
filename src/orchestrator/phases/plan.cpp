// --plan: one worker calibrates (one forward, one decode), and the run's cost is estimated from it
// without spending anything of the run.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/json_file.h"
#include "base/remove_tree.h"
#include "base/strings.h"
#include "orchestrator/phases/phases.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {

std::vector<gates::PlannedGeneration> gate_plan_of(const RunRequest& req, int64_t prompts_in_split, bool split_cached,
                                                   const std::vector<std::string>& ids, bool baseline_gate) {
  const int64_t np = req.gate.max_prompts > 0 ? std::min(req.gate.max_prompts, prompts_in_split) : prompts_in_split;
  std::vector<std::string> names(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), static_cast<size_t>(np)));
  for (int64_t i = static_cast<int64_t>(names.size()); i < np; ++i) names.push_back("prompt " + std::to_string(i + 1));
  return gates::plan_gate_generations(names, req.gate, std::vector<bool>(names.size(), split_cached), baseline_gate);
}

double plan_seconds(const std::vector<gates::PlannedGeneration>& plan, const gates::ClipCost& cost, double speedup) {
  double total = 0;
  for (const auto& g : plan) total += gates::planned_seconds(g, cost, speedup);
  return total;
}

PlanEstimate estimate_plan(const RunRequest& req, const json& cal, int64_t prompts_in_split,
                           const std::optional<gates::RunConfig>& config) {
  PlanEstimate e;
  e.workers = std::max<int64_t>(
      1, req.gpus.empty() ? req.workers : static_cast<int64_t>(std::count(req.gpus.begin(), req.gpus.end(), ',') + 1));
  if (req.gpus == "all") e.workers = std::max<int64_t>(1, req.gpu_count);
  e.load_s = cal.value("worker_load_s", 0.0);
  e.clip_s = cal.value("clip_estimate_s", 0.0);
  e.forward_s = cal.value("forward_s", 0.0);
  e.decode_s = cal.value("decode_s", 0.0);
  e.text_s = cal.value("text_s", 0.0);
  // The generations of one gate run as the gate plans them (gates/gate_plan.h): the run's own gate of the
  // baseline makes every baseline output of the split (its split clips) and caches it; a candidate's gate after
  // it finds them in the cache. Priced at the baseline's speed (a candidate's own is unknown before its
  // screen), and at 2x.
  const std::vector<gates::PlannedGeneration> cold = gate_plan_of(req, prompts_in_split, false, {}, true);
  const std::vector<gates::PlannedGeneration> warm = gate_plan_of(req, prompts_in_split, true);
  e.cost.clip_s = e.clip_s;
  if (config) {  // a step is every CFG branch's forward: what a warm-up of fewer steps leaves out
    e.cost.steps = config->steps;
    e.cost.step_s = (config->guidance > 1.0 ? 2 : 1) * e.forward_s;
  }
  e.baseline_gate_s = plan_seconds(cold, e.cost, 1.0);
  e.gate_s = plan_seconds(warm, e.cost, 1.0);
  e.gate_2x_s = plan_seconds(warm, e.cost, 2.0);
  e.gate_generations = gates::generations_made(warm);
  e.screen_s = (2 * std::max<int64_t>(1, req.screen_forwards) + 4) * e.forward_s + e.text_s;
  // A worker's first trial: its warm-up (a few steps, as the gate's), the baseline and the candidate on one prompt.
  gates::PlannedGeneration trial_warmup;
  trial_warmup.steps = req.gate.warmup_steps;
  e.trial_s = gates::planned_seconds(trial_warmup, e.cost, 1.0) + 2 * e.clip_s;
  const double budget_s = req.budget_minutes * 60.0;
  const int64_t families = static_cast<int64_t>(req.families.size());
  // Exploration: each family's trials on about two prompts, sharing the workers, until the deadline (half of
  // what the budget has left after the load and the baseline's gate); a trial's baseline run of a prompt is the
  // worker's kept one on a GPU (workers/trial_baselines.h), so a trial there makes the candidate's clips only.
  // Priced at the candidates' speed: their trials run as fast as their gates.
  const double baseline_clips = req.load.precision.device.is_cuda() ? 0.0 : 1.0;
  const double began_s = e.load_s + e.baseline_gate_s;
  auto exploration = [&](double speedup) {
    return std::min(families * req.executor_trials * 2.0 * (baseline_clips + 1.0 / speedup) * e.clip_s,
                    (exploration_deadline_s(budget_s, began_s) - began_s) * e.workers);
  };
  e.exploration_s = exploration(1.0);
  const int64_t candidates = std::max<int64_t>(0, req.budget_trials - 1);
  auto fit = [&](double gate_s, double exploration_s) {
    const double left = std::max(0.0, budget_s * e.workers - e.load_s * e.workers - e.baseline_gate_s - exploration_s);
    return gate_s + e.screen_s > 0 ? std::min<int64_t>(candidates, static_cast<int64_t>(left / (gate_s + e.screen_s)))
                                   : candidates;
  };
  e.gates_fit = fit(e.gate_s, e.exploration_s);
  e.gates_fit_2x = fit(e.gate_2x_s, exploration(2.0));
  e.gating_s = e.gates_fit * (e.gate_s + e.screen_s);
  e.total_device_s = e.load_s * e.workers + e.baseline_gate_s + e.exploration_s + e.gating_s;
  e.wall_s = e.total_device_s / e.workers;
  // The least that gates one candidate: load, the baseline's gate, one trial (the exploration gets half of what
  // is left after the baseline's gate, so that half must hold the trial), a screen and a gate; priced with a
  // candidate of the baseline's speed, and at 2x.
  auto least = [&](double baseline_gate_s, double gate_s) {
    return e.load_s + baseline_gate_s + std::max(2.0 * e.trial_s, e.trial_s + e.screen_s + gate_s);
  };
  e.min_budget_s = least(e.baseline_gate_s, e.gate_s);
  e.min_budget_2x_s = least(e.baseline_gate_s, e.gate_2x_s);
  // A later run on the machine takes the baseline's verdict and outputs from the cache (phases/baseline.cpp).
  e.min_budget_cached_s = least(0.0, e.gate_s);
  e.min_budget_2x_cached_s = least(0.0, e.gate_2x_s);
  e.enough = true;
  const auto num = [](double v) { return base::format_fixed(v, 2); };
  if (req.budget_trials < 2) {
    e.enough = false;
    e.why = "--budget-trials " + std::to_string(req.budget_trials) +
            " holds only the baseline's own gate run; one candidate needs 2";
  } else if (budget_s < e.min_budget_s) {
    e.enough = false;
    e.why = "--budget-minutes " + num(req.budget_minutes) + " cannot gate one candidate: that needs about " +
            num(e.min_budget_s / 60.0) + " minutes (model load " + num(e.load_s) + " s, baseline gate " +
            num(e.baseline_gate_s) + " s, one executor trial " + num(e.trial_s) + " s, one screen " + num(e.screen_s) +
            " s, one candidate gate " + num(e.gate_s) +
            " s; the exploration gets half of what the baseline's gate leaves)";
  }
  return e;
}

json plan_json(const RunState& s, const json& cal, const PlanEstimate& e) {
  const RunRequest& req = s.req;
  return {{"model", req.load.model},
          {"config", gates::to_json(s.base.config)},
          {"official_config", s.official},
          {"workers", e.workers},
          {"calibration", cal},
          {"estimate",
           {{"load_s", e.load_s},
            {"clip_s", e.clip_s},
            {"gate_s", e.gate_s},
            {"gate_2x_s", e.gate_2x_s},
            {"gate_generations", e.gate_generations},
            {"screen_s", e.screen_s},
            {"trial_s", e.trial_s},
            {"baseline_gate_s", e.baseline_gate_s},
            {"exploration_s", e.exploration_s},
            {"gating_s", e.gating_s},
            {"candidate_gates", e.gates_fit},
            {"candidate_gates_2x", e.gates_fit_2x},
            {"total_device_s", e.total_device_s},
            {"wall_s", e.wall_s},
            {"min_budget_s", e.min_budget_s},
            {"min_budget_cached_s", e.min_budget_cached_s},
            {"min_budget_2x_s", e.min_budget_2x_s},
            {"min_budget_2x_cached_s", e.min_budget_2x_cached_s}}},
          {"budget",
           {{"minutes", req.budget_minutes}, {"trials", req.budget_trials}, {"executor_trials", req.executor_trials}}},
          {"enough", e.enough},
          {"reason", e.why}};
}

namespace {

// One worker in a private folder (removed after): --plan spends nothing of the run and writes nothing
// under --out but plan.json.
json calibrate(RunState& s) {
  std::string tmpl = (fs::temp_directory_path() / "autooptim-plan-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw Error("--plan: cannot make a temporary folder");
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      runtime::remove_tree(dir, ec);
    }
  } cleanup{tmpl};
  LocalWorkers launcher(tmpl, s.req.model_cli, {s.slots.front()}, 0);
  workers::ClientOptions co;
  co.no_worker_s = 5;
  workers::Client client(tmpl, "plan", co);
  s.progress.line("--plan: calibrating " + s.req.load.model + " on one worker (one forward, one decode)");
  start_workers(launcher, client, s.progress);
  const workers::Response answer = client.call(
      {{"kind", "calibrate"}, {"model", s.base.model}, {"base", gates::to_json(s.base)}}, [&] { launcher.check(); });
  const json cal = answer.result;
  launcher.stop(10);
  s.progress.clear();
  return cal;
}

// One candidate gate, generation by generation (docs/gate-cost.md says what each serves).
void print_gate_generations(const RunState& s, const PlanEstimate& e) {
  std::vector<std::string> ids;
  for (const auto& p : s.prompts.split(s.req.split)) ids.push_back(p.id);
  const auto plan = gate_plan_of(s.req, static_cast<int64_t>(ids.size()), true, ids);
  std::printf("  one candidate gate on %s, after the baseline's gate cached the split's baseline outputs:\n",
              s.req.split.c_str());
  std::printf("    %-3s %-18s %-9s %-28s %-8s %8s %8s  %s\n", "#", "role", "side", "prompt", "note", "at 1x", "at 2x",
              "serves");
  int n = 0;
  for (const auto& g : plan) {
    const std::string cache = g.conditional ? "if need"
                              : g.cached    ? "cached"
                              : g.cacheable ? "made"
                              : g.steps > 0 ? std::to_string(g.steps) + " steps"
                                            : "-";
    std::printf("    %-3d %-18s %-9s %-28s %-8s %8.1f %8.1f  %s\n", ++n, g.role.c_str(), g.side.c_str(),
                g.prompt.c_str(), cache.c_str(), gates::planned_seconds(g, e.cost, 1.0),
                gates::planned_seconds(g, e.cost, 2.0), g.serves.c_str());
  }
  std::printf("    %lld generations: %.1f s at 1x, %.1f s at 2x (conditional ones not counted)\n",
              static_cast<long long>(e.gate_generations), e.gate_s, e.gate_2x_s);
}

void print_plan(const RunState& s, const PlanEstimate& e) {
  const RunRequest& req = s.req;
  const auto& c = s.base.config;
  std::printf("plan for %s at %lldx%lld, %lld frames, %lld steps%s on %lld worker(s)\n", req.load.model.c_str(),
              static_cast<long long>(c.width), static_cast<long long>(c.height), static_cast<long long>(c.frames),
              static_cast<long long>(c.steps), s.official ? " (official configuration)" : " (reduced configuration)",
              static_cast<long long>(e.workers));
  std::printf("  calibration: forward %.3f s, decode %.3f s, text %.3f s, model load %.1f s -> one clip about %.1f s\n",
              e.forward_s, e.decode_s, e.text_s, e.load_s, e.clip_s);
  std::printf(
      "  the baseline's gate about %.1f s; one candidate gate about %.1f s (%.1f s at 2x), one screen %.1f s, one "
      "executor trial %.1f s\n",
      e.baseline_gate_s, e.gate_s, e.gate_2x_s, e.screen_s, e.trial_s);
  print_gate_generations(s, e);
  std::printf(
      "  estimated device time: %.0f s (baseline gate %.0f, exploration %.0f, %lld candidate gates %.0f, %lld if they "
      "run at 2x); wall about %.1f min\n",
      e.total_device_s, e.baseline_gate_s, e.exploration_s, static_cast<long long>(e.gates_fit), e.gating_s,
      static_cast<long long>(e.gates_fit_2x), e.wall_s / 60.0);
  std::printf(
      "  budget: %s minutes, %lld gate runs; the least that gates one candidate: %.1f minutes (%.1f with the "
      "baseline's gate cached by an earlier run on this machine; at 2x %.1f and %.1f)\n",
      base::format_fixed(req.budget_minutes, 2).c_str(), static_cast<long long>(req.budget_trials),
      e.min_budget_s / 60.0, e.min_budget_cached_s / 60.0, e.min_budget_2x_s / 60.0, e.min_budget_2x_cached_s / 60.0);
}

}  // namespace

RunOutcome plan_run(RunState& s) {
  const json cal = calibrate(s);
  const PlanEstimate e =
      estimate_plan(s.req, cal, static_cast<int64_t>(s.prompts.split(s.req.split).size()), s.base.config);
  print_plan(s, e);
  // The figures as JSON for scripts: in OUT/plan.json when --out is given, never on the terminal.
  if (s.req.out_dir != "(plan)") {
    fs::create_directories(s.req.out_dir);
    base::write_json_file((fs::path(s.req.out_dir) / "plan.json").string(), plan_json(s, cal, e));
    std::printf("  the plan as JSON: %s\n", (fs::path(s.req.out_dir) / "plan.json").c_str());
  }
  RunOutcome o;
  if (!e.enough) {
    o.exit_code = 2;
    o.problems.push_back("the budget cannot gate one candidate: " + e.why);
  }
  return o;
}

}  // namespace autooptim::orchestrator
