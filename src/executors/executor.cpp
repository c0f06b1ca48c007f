#include "executors/executor.h"

#include <algorithm>
#include <csignal>
#include <signal.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "executors/trial_runner.h"
#include "runtime/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

class Outbox {
 public:
  Outbox(const std::string& dir, const gates::Manifest& base, std::string family)
      : dir_(dir), base_(base), family_(std::move(family)) {
    fs::create_directories(dir_);
  }

  void log(const Trial& t) {
    std::ofstream out(fs::path(dir_) / "trials.jsonl", std::ios::app);
    out << t.to_json().dump() << "\n";
    std::fprintf(stderr, "[%s] %-40s %6.3fx  PSNR %6.2f dB  (%lld prompts)%s%s\n", family_.c_str(), t.label.c_str(), t.speedup,
                 t.psnr_min, static_cast<long long>(t.prompts), t.engaged() ? "" : "  not engaged: ",
                 t.engaged() ? "" : t.not_engaged.front().c_str());
  }

  // Writes a manifest proposal (atomically: temp file then rename) and returns its path.
  std::string propose(const std::string& slug, const json& flags, bool lossless, const std::string& why) {
    gates::Manifest m = base_;
    m.id = base_.model + "/" + family_ + "/" + slug;
    m.kind = "patch";
    m.family = family_;
    m.base = base_.id;
    m.flags = flags;
    m.lossless = lossless;
    m.description = why;
    m.parents.clear();
    const json j = gates::to_json(gates::parse_manifest(gates::to_json(m), "proposal " + m.id));
    const fs::path tmp = fs::path(dir_) / (".tmp-" + slug + ".json");
    const fs::path dst = fs::path(dir_) / (slug + ".json");
    {
      std::ofstream out(tmp);
      out << j.dump(2) << "\n";
    }
    fs::rename(tmp, dst);
    ++proposed_;
    return dst.string();
  }
  int proposed() const { return proposed_; }

 private:
  std::string dir_;
  gates::Manifest base_;
  std::string family_;
  int proposed_ = 0;
};

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// kernel: greedy ablation. Start with every switch the build has on; drop each switch whose removal
// does not make the run slower; propose the surviving set and each surviving switch alone.
int explore_kernel(const ExecutorRequest& r, TrialRunner& run, Outbox& box) {
  std::vector<std::pair<std::string, json>> switches = {
      {"cross_kv_cache", true}, {"timestep_dedup", true}, {"fused_qkv", true}};
  if (run.on_gpu()) {
    switches.push_back({"cuda_graph", true});
    switches.push_back({"attention_backend", "cudnn"});
    switches.push_back({"attention_backend", "flash"});
  }
  auto flags_of = [](const std::vector<std::pair<std::string, json>>& s) {
    json f = json::object();
    for (const auto& [k, v] : s) f[k] = v;
    return f;
  };
  // Two attention backends cannot both be on: try the set with the first, ablation decides.
  std::vector<std::pair<std::string, json>> on;
  for (const auto& s : switches)
    if (!(s.first == "attention_backend" && std::any_of(on.begin(), on.end(), [](const auto& x) { return x.first == "attention_backend"; })))
      on.push_back(s);
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
  if (run.on_gpu() && run.can_measure(r.budget_trials)) {
    // The other attention backend, on the surviving set.
    auto alt = on;
    for (auto& s : alt)
      if (s.first == "attention_backend") s.second = "flash";
    if (flags_of(alt) != flags_of(on)) {
      Trial t = run.measure(flags_of(alt), "alt backend", n);
      box.log(t);
      if (t.speedup > all.speedup) on = alt, all = t;
    }
  }
  if (all.speedup > 1.0 && all.engaged()) box.propose("greedy", flags_of(on), true, "greedy ablation survivors: " + flags_of(on).dump());
  for (const auto& s : on)
    if (on.size() > 1) box.propose(s.first + (s.second.is_string() ? "-" + s.second.get<std::string>() : ""), flags_of({s}), true,
                                   "single switch from the greedy ablation");
  return box.proposed();
}

// cache: EasyCache threshold sweep with successive halving: every threshold on one prompt, the better
// half on the smoke prompts, the better half of those on more visible prompts.
int explore_cache(const ExecutorRequest& r, TrialRunner& run, Outbox& box) {
  std::vector<double> thresholds = {0.02, 0.05, 0.08, 0.12, 0.2, 0.3};
  // EasyCache's dense warm-up is the first 20% of the steps (10 of 50 in the paper's setting).
  const int64_t warmup = std::max<int64_t>(1, run.steps() / 5);
  auto flags = [warmup](double th) {
    return json{{"easycache", {{"enabled", true}, {"threshold", th}, {"warmup_steps", warmup}, {"dense_last_step", true}}}};
  };
  std::vector<std::pair<double, Trial>> pool;
  int64_t n = 1;
  for (double th : thresholds) {
    if (!run.can_measure(r.budget_trials)) break;
    Trial t = run.measure(flags(th), "threshold " + fmt(th), n);
    box.log(t);
    pool.push_back({th, t});
  }
  // Score: speed when the quality floor holds, else nothing.
  auto score = [&r](const Trial& t) { return t.psnr_min >= r.min_psnr - 5.0 ? t.speedup : 0.0; };
  while (pool.size() > 1 && run.can_measure(r.budget_trials)) {
    std::sort(pool.begin(), pool.end(), [&](const auto& a, const auto& b) { return score(a.second) > score(b.second); });
    pool.resize((pool.size() + 1) / 2);
    n = std::min<int64_t>(n * 3, static_cast<int64_t>(run.prompts().size()));
    for (auto& [th, t] : pool) {
      if (!run.can_measure(r.budget_trials)) break;
      t = run.measure(flags(th), "threshold " + fmt(th), n);
      box.log(t);
    }
    if (n >= static_cast<int64_t>(run.prompts().size())) break;
  }
  // Proposed: the survivors that were faster, engaged, and within 5 dB of the gate's quality floor on
  // the visible prompts (the gates pick the tiers; a threshold far below the floor would only spend
  // gate runs the composition and the held-out checks need).
  for (const auto& [th, t] : pool)
    if (t.speedup > 1.0 && t.engaged() && t.psnr_min >= r.min_psnr - 5.0)
      box.propose("easycache-t" + fmt(th), flags(th), false, "EasyCache threshold " + fmt(th) + " (successive halving survivor)");
  return box.proposed();
}

// sparse: a density sweep over the two patterns and the number of dense steps.
int explore_sparse(const ExecutorRequest& r, TrialRunner& run, Outbox& box) {
  std::vector<std::pair<std::string, json>> grid;
  // Dense steps as a fraction of the run's steps (10 and 20 of 50).
  const int64_t ds10 = std::max<int64_t>(1, run.steps() / 5), ds20 = std::max<int64_t>(1, 2 * run.steps() / 5);
  for (int64_t ds : {ds10, ds20})
    grid.push_back({"st-ds" + std::to_string(ds),
                    {{"sparse", {{"pattern", "spatial_temporal"}, {"dense_layers", 1}, {"dense_steps", ds}}}}});
  for (int64_t wf : {1, 2})
    grid.push_back({"tw-f" + std::to_string(wf) + "-ds10",
                    {{"sparse", {{"pattern", "tile_window"}, {"window_frames", wf}, {"window_tiles", 0}, {"dense_layers", 1}, {"dense_steps", ds10}}}}});
  std::vector<std::pair<std::string, Trial>> results;
  for (const auto& [slug, f] : grid) {
    if (!run.can_measure(r.budget_trials)) break;
    Trial t = run.measure(f, slug, 2);
    box.log(t);
    results.push_back({slug, t});
  }
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].second.speedup > 1.0 && results[i].second.engaged() && results[i].second.psnr_min >= r.min_psnr - 5.0)
      box.propose(results[i].first, grid[i].second, false, "sparse attention sweep survivor");
  return box.proposed();
}

}  // namespace

int run_executor(const ExecutorRequest& req) {
  // SIGTERM (the orchestrator's exploration deadline or its interruption) and SIGINT (a ^C reaching
  // the run's process group) end the search after the trial in progress; the family then proposes
  // from what it has measured instead of losing it. The orchestrator starts us with both blocked, so
  // one that arrived before this point is pending and is delivered here, to the handler.
  struct sigaction sa {};
  sa.sa_handler = [](int) { TrialRunner::request_stop(); };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_UNBLOCK, &stop_signals, nullptr);
  std::fprintf(stderr, "executor %s: started (pid %d)\n", req.family.c_str(), static_cast<int>(getpid()));
  std::fflush(stderr);
  const gates::Manifest base = gates::load_manifest(req.base_manifest);
  if (base.kind != "baseline") throw Error(req.base_manifest + ": not a baseline manifest");
  std::vector<gates::Prompt> prompts = gates::load_prompt_file(req.prompts_file);
  for (const auto& p : prompts)
    for (const auto& s : p.splits)
      if (s.rfind("heldout", 0) == 0) throw Error(req.prompts_file + ": executors must not see held-out prompts (" + p.id + ")");
  // Smoke prompts first: the halving starts on them.
  std::stable_sort(prompts.begin(), prompts.end(), [](const gates::Prompt& a, const gates::Prompt& b) {
    auto smoke = [](const gates::Prompt& p) { return std::find(p.splits.begin(), p.splits.end(), "smoke") != p.splits.end(); };
    return smoke(a) && !smoke(b);
  });
  Outbox box(req.outbox, base, req.family);
  TrialRunner run(req, base, prompts);
  int n = 0;
  if (req.family == "kernel") n = explore_kernel(req, run, box);
  else if (req.family == "cache") n = explore_cache(req, run, box);
  else if (req.family == "sparse") n = explore_sparse(req, run, box);
  else throw Error("unknown executor family '" + req.family + "' (kernel, cache, sparse)");
  std::ofstream(fs::path(req.outbox) / "done") << n << "\n";
  return n;
}

}  // namespace autooptim::executors
