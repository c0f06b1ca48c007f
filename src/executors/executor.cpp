#include "executors/executor.h"
#include "base/stop_signals.h"

#include <algorithm>
#include <csignal>
#include <signal.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

#include "executors/agent_host.h"
#include "executors/outbox.h"
#include "executors/search.h"
#include "executors/trial_runner.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "runtime/techniques/registry.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// The search points the registry's techniques of `family` declare for this run, in registry order.
std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>> search_space(
    const std::string& family, const TrialRunner& run) {
  const runtime::techniques::SearchContext ctx{run.steps(), run.on_gpu()};
  std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>> out;
  for (const auto& t : runtime::techniques::all())
    if (t.family == family && t.search)
      for (auto& p : t.search(ctx)) out.push_back({&t, std::move(p)});
  return out;
}

// What a proposal says it measured: the speedup, and the skip ratio or attention density when counted.
std::string measured(const Trial& t) {
  std::string out = "measured " + fmt(t.speedup) + "x, PSNR " + fmt(t.psnr_min) + " dB on " +
                    std::to_string(t.prompts) + " visible prompt(s)";
  if (t.skip_ratio >= 0) out += ", forward-skip ratio " + fmt(t.skip_ratio);
  if (t.density >= 0) out += ", attention density " + fmt(t.density);
  return out;
}

// The PSNR the cache, sparse and quant families' proposals must reach on the visible prompts: within 5 dB
// of the gate's quality floor (the gates pick the tiers; a setting far below the floor would only spend
// gate runs the composition and the held-out checks need).
double proposal_floor(const ExecutorRequest& r) { return r.min_psnr - 5.0; }

// A measured point worth a proposal: faster, engaged, and at the proposal floor on the visible prompts.
bool proposable(const ExecutorRequest& r, const Trial& t) {
  return t.speedup > 1.0 && t.engaged() && t.psnr_min >= proposal_floor(r);
}

// When a family that filters its proposals by the quality floor ends with none, it proposes its closest miss
// (see closest_miss) once: the orchestrator gates it like any proposal, so the report records why the family
// has nothing rather than an empty family. `tried`: one entry per measured search point, its latest trial.
void propose_best_effort(const ExecutorRequest& r, Outbox& box, const std::vector<Candidate>& tried) {
  if (box.proposed() > 0) return;
  const Candidate* c = closest_miss(tried);
  if (!c) {
    std::fprintf(stderr, "[%s] no proposal: no trial was engaged and faster than 1.0x\n", r.family.c_str());
    return;
  }
  std::fprintf(stderr, "[%s] no trial met the quality floor (%s dB): proposing the closest miss, %s (PSNR %.2f dB)\n",
               r.family.c_str(), fmt(proposal_floor(r)).c_str(), c->label.c_str(), c->trial.psnr_min);
  box.propose(c->label, c->flags, c->tech ? c->tech->lossless : false,
              "best effort: no trial met the quality floor (" + fmt(proposal_floor(r)) + " dB); " + measured(c->trial));
}

// kernel: greedy ablation. Start with every switch the registry's kernel techniques offer for this run
// on; drop each switch whose removal does not make the run slower (the lossy ones tried first); propose
// the surviving set and each surviving switch alone.
int explore_kernel(const ExecutorRequest& r, TrialRunner& run, Outbox& box) {
  KernelSwitches ks = kernel_switches(search_space("kernel", run));
  auto& [on, alternatives, lossless, slot] = ks;
  auto flags_of = [](const std::vector<std::pair<std::string, json>>& s) {
    json f = json::object();
    for (const auto& [k, v] : s) f[k] = v;
    return f;
  };
  if (on.empty()) return 0;
  const int64_t n = 2;
  Trial all = run.measure(flags_of(on), "all", n);
  box.log(all);
  for (size_t i = 0; i < on.size() && run.can_measure(r.budget_trials);) {
    auto without = on;
    without.erase(without.begin() + static_cast<long>(i));
    if (without.empty()) break;
    Trial t = run.measure(flags_of(without), "without " + on[i].first, n);
    box.log(t);
    if (t.speedup >= all.speedup * 0.99) {
      on = without;  // the switch did not pay for itself
      all = t;
    } else {
      ++i;
    }
  }
  for (const auto& [key, value] : alternatives) {
    if (!run.can_measure(r.budget_trials)) break;
    // In place of its slot's survivor, or added when the ablation dropped that slot (the sub-pixel
    // upsampler not paying says nothing about the transposed one).
    auto alt = on;
    bool replaced = false;
    for (auto& s : alt)
      if (slot[s.first] == slot[key]) s = {key, value}, replaced = true;
    if (!replaced) alt.push_back({key, value});
    if (flags_of(alt) == flags_of(on)) continue;
    Trial t = run.measure(flags_of(alt), "alt " + key + " " + value.dump(), n);
    box.log(t);
    if (t.speedup > all.speedup) on = alt, all = t;
  }
  if (all.speedup > 1.0 && all.engaged())
    // Lossless only when every surviving switch is (the fused kernels round differently: lossy).
    box.propose("greedy", flags_of(on),
                std::all_of(on.begin(), on.end(), [&](const auto& s) { return lossless[s.first]; }),
                "greedy ablation survivors: " + flags_of(on).dump() + "; " + measured(all));
  for (const auto& s : on)
    if (on.size() > 1)
      box.propose(s.first + (s.second.is_string() ? "-" + s.second.get<std::string>() : ""), flags_of({s}),
                  lossless[s.first], "single switch from the greedy ablation");
  return box.proposed();
}

// cache: every cache policy's search points, calibrated first where the policy needs it (on the first
// visible prompt), then successive halving: the points on one prompt (interleaved across policies, so a
// short budget still tries each), the better half on the smoke prompts, the better half of those on more
// visible prompts. An adaptive policy that skipped nothing brings a fixed-schedule policy's next point
// forward (fixed_schedule_next): on a model whose outputs change too much for the adaptive rules to fire,
// the fixed schedule is what the gate can judge.
int explore_cache(const ExecutorRequest& r, TrialRunner& run, Outbox& box) {
  std::vector<Candidate> order = cache_order(search_space("cache", run));
  // A policy that needs a calibration gets it just before its first measurement, so a short budget
  // does not spend itself on calibrations (they are not candidate trials: one run, no baseline).
  std::map<const runtime::techniques::Technique*, json> calibrated;
  // order[0, measured) are the points measured so far, each with its latest trial (fixed_schedule_next only
  // moves points not yet measured); pool holds the survivors' positions in it.
  std::vector<size_t> pool;
  size_t measured_points = 0;
  int64_t n = 1;
  for (size_t i = 0; i < order.size(); ++i) {
    if (!run.can_measure(r.budget_trials)) break;
    Candidate& c = order[i];
    if (c.tech->calibration && !calibrated.count(c.tech)) {
      calibrated[c.tech] =
          c.tech->calibration->fit(run.traces(c.tech->calibration->flags, "calibrate " + c.tech->name, 1));
      std::fprintf(stderr, "[cache] %s calibrated on the first visible prompt: %s\n", c.tech->name.c_str(),
                   calibrated[c.tech].dump().substr(0, 200).c_str());
    }
    if (c.tech->calibration) c.flags.merge_patch(calibrated[c.tech]);
    c.trial = run.measure(c.flags, c.label, n);
    box.log(c.trial);
    pool.push_back(i);
    measured_points = i + 1;
    if (fixed_schedule_next(order, i + 1, c))
      std::fprintf(stderr, "[cache] %s skipped nothing: the fixed schedule %s next\n", c.label.c_str(),
                   order[i + 1].label.c_str());
  }
  // Score: speed when the quality floor holds, else nothing.
  auto score = [&](size_t k) { return order[k].trial.psnr_min >= proposal_floor(r) ? order[k].trial.speedup : 0.0; };
  while (pool.size() > 1 && run.can_measure(r.budget_trials)) {
    std::sort(pool.begin(), pool.end(), [&](size_t a, size_t b) { return score(a) > score(b); });
    pool.resize((pool.size() + 1) / 2);
    n = std::min<int64_t>(n * 3, static_cast<int64_t>(run.prompts().size()));
    for (size_t k : pool) {
      if (!run.can_measure(r.budget_trials)) break;
      Candidate& c = order[k];
      c.trial = run.measure(c.flags, c.label, n);
      box.log(c.trial);
    }
    if (n >= static_cast<int64_t>(run.prompts().size())) break;
  }
  // Proposed: the survivors that were faster, engaged, and at the proposal floor on the visible prompts.
  for (size_t k : pool) {
    const Candidate& c = order[k];
    if (proposable(r, c.trial))
      box.propose(c.label, c.flags, c.tech->lossless, c.label + " (successive halving survivor); " + measured(c.trial));
  }
  order.resize(measured_points);  // the points never measured are not candidates for the best effort
  propose_best_effort(r, box, order);
  return box.proposed();
}

// sparse and quant: every search point the registry's techniques of the family declare (sparse attention's
// patterns, densities and dense steps; the quantisations of this run, FP8 GEMMs on GPUs), each measured on two
// visible prompts and proposed when faster and near the quality floor; lossy, so the gate's quality check decides.
int explore_sweep(const ExecutorRequest& r, TrialRunner& run, Outbox& box, const std::string& what) {
  std::vector<Candidate> results;
  for (const auto& [tech, point] : search_space(r.family, run)) {
    if (!run.can_measure(r.budget_trials)) break;
    Trial t = run.measure(point.flags, point.label, 2);
    box.log(t);
    results.push_back({tech, point.label, point.flags, t});
  }
  for (const auto& c : results)
    if (proposable(r, c.trial)) box.propose(c.label, c.flags, false, what + " survivor; " + measured(c.trial));
  propose_best_effort(r, box, results);
  return box.proposed();
}

}  // namespace

std::vector<size_t> middle_out(size_t n) {
  std::vector<size_t> order;
  if (n == 0) return order;
  const size_t mid = (n - 1) / 2;
  for (size_t k = 0; order.size() < n; ++k) {
    if (mid + k < n) order.push_back(mid + k);
    if (k > 0 && k <= mid) order.push_back(mid - k);
  }
  return order;
}

gates::Manifest load_baseline(const std::string& path) {
  gates::Manifest base = gates::load_manifest(path);
  if (base.kind != "baseline") throw Error(path + ": not a baseline manifest");
  return base;
}

std::vector<gates::Prompt> load_visible_prompts(const std::string& path) {
  std::vector<gates::Prompt> prompts = gates::load_prompt_file(path);
  for (const auto& p : prompts)
    for (const auto& s : p.splits)
      if (s.rfind("heldout", 0) == 0) throw Error(path + ": executors must not see held-out prompts (" + p.id + ")");
  // Smoke prompts first: the halving starts on them.
  std::stable_sort(prompts.begin(), prompts.end(), [](const gates::Prompt& a, const gates::Prompt& b) {
    auto smoke = [](const gates::Prompt& p) {
      return std::find(p.splits.begin(), p.splits.end(), "smoke") != p.splits.end();
    };
    return smoke(a) && !smoke(b);
  });
  return prompts;
}

int run_executor(const ExecutorRequest& req) {
  if (!req.agent.empty()) return run_agent_executor(req);
  const pid_t parent = getppid();
  // SIGTERM (the orchestrator's exploration deadline or its interruption) and SIGINT (a ^C reaching
  // the run's process group) end the search after the trial in progress; the family then proposes
  // from what it has measured instead of losing it. The orchestrator starts us with both blocked, so
  // one that arrived before this point is pending and is delivered here, to the handler.
  base::catch_stop_signals([](int) { TrialRunner::request_stop(); }, /*once=*/false);
  std::fprintf(stderr, "executor %s: started (pid %d)\n", req.family.c_str(), static_cast<int>(getpid()));
  std::fflush(stderr);
  const gates::Manifest base = load_baseline(req.base_manifest);
  const std::vector<gates::Prompt> prompts = load_visible_prompts(req.prompts_file);
  Outbox box(req.outbox, base, req.family);
  TrialRunner run(req, base, prompts);
  int n = 0;
  if (req.family == "kernel")
    n = explore_kernel(req, run, box);
  else if (req.family == "cache")
    n = explore_cache(req, run, box);
  else if (req.family == "sparse")
    n = explore_sweep(req, run, box, "sparse attention sweep");
  else if (req.family == "quant")
    n = explore_sweep(req, run, box, "quantisation");
  else
    throw Error("unknown executor family '" + req.family + "' (kernel, cache, sparse, quant)");
  // Written last and only after every proposal is on disk: --resume skips a family that has it. Not when the
  // orchestrator died (its death's SIGTERM ended the search early; we were re-parented): the search is not
  // finished, and --resume must run it again (issue 38).
  if (getppid() != parent) {
    std::fprintf(stderr, "executor %s: the orchestrator died; the search is not finished (--resume runs it again)\n",
                 req.family.c_str());
    return n;
  }
  gates::write_file_atomic((fs::path(req.outbox) / "done").string(), std::to_string(n) + "\n");
  return n;
}

}  // namespace autooptim::executors
