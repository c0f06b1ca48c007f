#include "orchestrator/orchestrator.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "gates/prompts.h"
#include "orchestrator/report.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace autooptim::orchestrator {
namespace {

struct Buckets {
  static const std::vector<std::pair<std::string, double>>& all() {
    static const std::vector<std::pair<std::string, double>> b = {{"1.5x", 1.5}, {"2x", 2.0}, {"3x", 3.0}, {"4x", 4.0}};
    return b;
  }
};

std::string slug(const std::string& id) {
  std::string s = id;
  for (auto& c : s)
    if (c == '/') c = '_';
  return s;
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  if (!out) throw Error(p.string() + ": cannot write");
}

// The live progress line: phase, trial, best speedup so far, time left.
class Progress {
 public:
  Progress(Clock::time_point start, double budget_s) : start_(start), budget_s_(budget_s) {}
  void show(const std::string& phase, int64_t trial, int64_t trials, double best) {
    const double left = budget_s_ - std::chrono::duration<double>(Clock::now() - start_).count();
    std::fprintf(stderr, "\r\033[K[%s] trial %lld/%lld  best %.2fx  %dm%02ds left", phase.c_str(), static_cast<long long>(trial),
                 static_cast<long long>(trials), best, static_cast<int>(std::max(0.0, left) / 60), static_cast<int>(std::max(0.0, left)) % 60);
    std::fflush(stderr);
  }
  void line(const std::string& msg) { std::fprintf(stderr, "\r\033[K%s\n", msg.c_str()); }
  double left_s() const { return budget_s_ - std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  Clock::time_point start_;
  double budget_s_;
};

struct Candidate {
  gates::Manifest m;
  std::string hash;
  json val;      // verdict on the gating split
  json heldout;  // verdict on the held-out split (tier candidates only)
  // A candidate the budget left ungated has a null verdict.
  template <typename T>
  T get(const char* k, T d) const { return val.is_object() ? val.value(k, d) : d; }
  bool accepted() const { return get("accepted", false); }
  // Passed every gate but the official-config one: what a reduced-configuration run can show.
  bool survived_reduced() const {
    if (accepted()) return true;
    if (!val.contains("gates")) return false;
    for (const auto& [g, x] : val["gates"].items())
      if (g != "official_config" && !x.value("pass", false)) return false;
    return true;
  }
  double speedup() const { return get("speedup", 0.0); }
  double psnr() const { return get("psnr", 0.0); }
  double ssim() const { return get("ssim", 0.0); }
};

// Spawns `autooptim executor ...` for one family; its output goes to log.
pid_t spawn_executor(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = fork();
  if (pid < 0) throw Error("cannot start an executor process: fork failed");
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f) dup2(fileno(stdout), STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::perror("execv");
    _exit(127);
  }
  return pid;
}

}  // namespace

json compose_flags(const json& base_flags, const std::vector<json>& parts) {
  json out = json::object();
  for (const auto& flags : parts)
    for (const auto& [k, v] : flags.items()) {
      if (k == "dtype" || k == "cpu_threads") continue;
      if (base_flags.contains(k) && base_flags[k] == v) continue;  // the part leaves it at the baseline's
      if (out.contains(k) && out[k] != v) return json();
      out[k] = v;
    }
  return out;
}

std::optional<gates::Manifest> compose_manifest(const gates::Manifest& base, const std::vector<const gates::Manifest*>& parts) {
  std::vector<json> part_flags;
  for (const auto* p : parts) part_flags.push_back(p->flags);
  const json flags = compose_flags(gates::to_json(base)["flags"], part_flags);
  if (flags.is_null()) return std::nullopt;
  gates::Manifest m = base;
  m.kind = "patch";
  m.family = "composite";
  m.base = base.id;
  m.flags = flags;
  m.lossless = std::all_of(parts.begin(), parts.end(), [](const gates::Manifest* p) { return p->lossless; });
  std::string id = base.model + "/composite/";
  for (size_t k = 0; k < parts.size(); ++k) {
    m.parents.push_back(parts[k]->id);
    id += (k ? "-plus-" : "") + parts[k]->id.substr(parts[k]->id.rfind('/') + 1);
  }
  m.id = id;
  m.description = "composition of the best accepted candidate of each family";
  return gates::parse_manifest(gates::to_json(m), "composition " + id);
}

std::string run(const RunRequest& req) {
  const auto start = Clock::now();
  Progress progress(start, req.budget_minutes * 60.0);
  const fs::path out(req.out_dir);
  if (!req.resume && fs::exists(out / "ledger.jsonl"))
    throw Error(out.string() + ": already holds a run (ledger.jsonl); use --resume to continue it or choose another --out");
  fs::create_directories(out / "manifests" / req.load.model);
  fs::create_directories(out / "outbox");
  fs::create_directories(out / "gates");
  gates::Ledger ledger((out / "ledger.jsonl").string());

  // Baseline, with the reduced configuration applied when asked for.
  gates::Manifest base = gates::load_manifest((fs::path(req.manifests_dir) / req.load.model / "baseline.json").string());
  if (req.frames) base.config.frames = req.frames;
  if (req.steps) base.config.steps = req.steps;
  if (req.height) base.config.height = req.height;
  if (req.width) base.config.width = req.width;
  base = gates::parse_manifest(gates::to_json(base), "baseline with the run's configuration");
  const bool official = base.config == gates::official_config(base.model);
  const fs::path base_path = out / "manifests" / req.load.model / "baseline.json";
  write_json(base_path, gates::to_json(base));

  // Executors see the visible prompts only: a file of their own.
  const auto visible = gates::load_prompts(req.prompts_dir, false);
  const fs::path visible_path = out / "prompts-visible.jsonl";
  {
    std::ofstream f(visible_path);
    for (const auto& p : visible.all()) f << json{{"id", p.id}, {"category", p.category}, {"prompt", p.text}, {"splits", p.splits}}.dump() << "\n";
  }

  progress.line("loading " + req.load.model + " (once for every gate run)");
  gates::Worker worker(req.load);

  // Verdicts already in the ledger (resume): manifest hash + split -> row, when decided in this
  // environment (build, weights, device, dtype).
  std::map<std::pair<std::string, std::string>, json> done;
  for (const auto& row : ledger.read_all())
    if (row.contains("manifest_hash") && row.contains("split") && gates::same_environment(row, worker))
      done[{row["manifest_hash"].get<std::string>(), row["split"].get<std::string>()}] = row;
  gates::GateSettings gs = req.gate;
  gs.prompts_dir = req.prompts_dir;
  gs.baseline_config = base.config;  // the pinned baseline at this run's configuration
  gs.cache_dir = (out / "baseline-cache").string();
  if (req.load.precision.device.is_cuda()) gs.exact_off_identity = false;

  int64_t gate_runs = 0;
  double best = 1.0;
  auto gate = [&](const gates::Manifest& m, const std::string& split, const std::string& phase) -> json {
    const std::string h = gates::manifest_hash(m);
    if (auto it = done.find({h, split}); it != done.end()) return it->second;
    if (gate_runs >= req.budget_trials || progress.left_s() <= 0) return json();
    ++gate_runs;
    progress.show(phase, gate_runs, req.budget_trials, best);
    const fs::path dir = out / "gates" / slug(m.id) / split;
    json v;
    try {
      v = gates::run_gate(worker, m, split, dir.string(), gs, &ledger).to_json();
    } catch (const Error& e) {
      // A candidate that cannot even run is rejected with the reason; the run goes on.
      v = {{"manifest", m.id}, {"manifest_hash", h}, {"split", split}, {"accepted", false}, {"speedup", 0.0}, {"psnr", 0.0}, {"ssim", 0.0},
           {"failure_signature", "could-not-run"}, {"gates", {{"artifacts", {{"pass", false}, {"reason", e.what()}}}}}};
      json row = v;
      for (const auto& [k, val] : gates::gate_environment(worker).items()) row[k] = val;
      ledger.append(row);
    }
    done[{h, split}] = v;
    if (v.value("accepted", false)) best = std::max(best, v.value("speedup", 0.0));
    return v;
  };

  // 1. The baseline against itself: its time is the denominator, and it fills the output cache.
  progress.line("baseline: " + base.id + (official ? " (official configuration)" : " (REDUCED configuration: no tier can be won)"));
  const json base_verdict = gate(base, req.split, "baseline");
  const double base_seconds = base_verdict.is_object() ? base_verdict.value("baseline_seconds", 0.0) : 0.0;

  // 2. Executors, one process per family, in parallel; each writes manifests to its outbox.
  const double explore_deadline_s = req.budget_minutes * 60.0 * 0.5;
  std::map<pid_t, std::string> running;
  for (const auto& fam : req.families) {
    const fs::path box = out / "outbox" / fam;
    if (req.resume && fs::exists(box / "done")) continue;
    fs::create_directories(box);
    std::vector<std::string> args = {"autooptim", "executor", "--family", fam};
    args.insert(args.end(), req.model_cli.begin(), req.model_cli.end());
    for (const auto& a : std::vector<std::string>{"--base", base_path.string(), "--prompts", visible_path.string(), "--outbox",
                                                  box.string(), "--budget-trials", std::to_string(req.executor_trials),
                                                  "--min-psnr", std::to_string(req.gate.min_psnr),
                                                  "--device-lock", (out / "outbox" / "device.lock").string()})
      args.push_back(a);
    running[spawn_executor(args, out / "outbox" / (fam + ".log"))] = fam;
  }
  // At the exploration deadline SIGTERM lets each executor finish its trial in progress and propose
  // from what it measured; one still busy after the grace period is killed (its proposals stay).
  const double grace_s = std::clamp(req.budget_minutes * 60.0 * 0.1, 10.0, 120.0);
  std::optional<Clock::time_point> stopped_at;
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && running.count(pid)) {
      const std::string fam = running[pid];
      running.erase(pid);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      progress.line("executor " + fam + (!ok ? " failed (see outbox/" + fam + ".log)"
                                             : stopped_at ? " stopped at the exploration budget" : " finished"));
      continue;
    }
    const auto now = Clock::now();
    if (!stopped_at && std::chrono::duration<double>(now - start).count() > explore_deadline_s) {
      for (const auto& [p, fam] : running) kill(p, SIGTERM);
      stopped_at = now;
    } else if (stopped_at && std::chrono::duration<double>(now - *stopped_at).count() > grace_s) {
      for (const auto& [p, fam] : running) {
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        progress.line("executor " + fam + " killed: still busy " + std::to_string(static_cast<int>(grace_s)) +
                      " s after the exploration budget");
      }
      running.clear();
      break;
    }
    progress.show(stopped_at ? "stopping" : "explore", gate_runs, req.budget_trials, best);
    std::this_thread::sleep_for(std::chrono::milliseconds(stopped_at ? 100 : 300));
  }

  // 3. Collect, de-duplicate by manifest hash, gate on the visible split.
  std::vector<Candidate> cands;
  std::set<std::string> seen = {gates::manifest_hash(base)};
  std::vector<fs::path> files;
  for (const auto& fam : req.families)
    if (fs::is_directory(out / "outbox" / fam))
      for (const auto& e : fs::directory_iterator(out / "outbox" / fam))
        if (e.path().extension() == ".json" && e.path().filename().string().rfind(".tmp", 0) != 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      gates::Manifest m = gates::load_manifest(f.string());
      const std::string h = gates::manifest_hash(m);
      if (!seen.insert(h).second) continue;
      cands.push_back({m, h, json(), json()});
    } catch (const Error& e) {
      progress.line(std::string("ignoring a malformed proposal: ") + e.what());
    }
  }
  for (auto& c : cands) c.val = gate(c.m, req.split, "gate");

  // 4. Compose the best accepted candidate of each family; a composition is gated again.
  std::map<std::string, const Candidate*> best_of;
  // On a reduced configuration nothing can be accepted (official-config gate); its survivors of every
  // other gate are composed all the same, so the composition step is exercised and reported.
  auto survivor = [official](const Candidate& c) { return official ? c.accepted() : c.survived_reduced(); };
  for (const auto& c : cands)
    if (survivor(c) && (!best_of.count(c.m.family) || c.speedup() > best_of[c.m.family]->speedup())) best_of[c.m.family] = &c;
  std::vector<std::vector<const Candidate*>> combos;
  std::vector<const Candidate*> fams;
  for (const auto& kv : best_of) fams.push_back(kv.second);
  for (size_t i = 0; i < fams.size(); ++i)
    for (size_t j = i + 1; j < fams.size(); ++j) combos.push_back({fams[i], fams[j]});
  if (fams.size() >= 3) combos.push_back(fams);
  std::vector<Candidate> composed;
  for (const auto& parts : combos) {
    std::vector<const gates::Manifest*> pm;
    for (const auto* c : parts) pm.push_back(&c->m);
    std::optional<gates::Manifest> composite;
    try {
      composite = compose_manifest(base, pm);
    } catch (const Error& e) {
      progress.line(std::string("skipping a composition that is not a valid manifest: ") + e.what());
      continue;
    }
    if (!composite) continue;  // the parts set one flag differently
    const gates::Manifest& m = *composite;
    if (!seen.insert(gates::manifest_hash(m)).second) continue;
    composed.push_back({m, gates::manifest_hash(m), json(), json()});
  }
  for (auto& c : composed) {
    c.val = gate(c.m, req.split, "compose");
    cands.push_back(c);
  }

  // 5. Tiers: per bucket, the accepted candidate with the best quality, confirmed on held-out prompts.
  json tiers = json::object();
  for (const auto& [bucket, need] : Buckets::all()) {
    std::vector<Candidate*> pool;
    for (auto& c : cands)
      if (c.accepted() && c.speedup() >= need) pool.push_back(&c);
    std::sort(pool.begin(), pool.end(), [](const Candidate* a, const Candidate* b) {
      return a->psnr() != b->psnr() ? a->psnr() > b->psnr() : a->speedup() > b->speedup();
    });
    tiers[bucket] = nullptr;
    for (auto* c : pool) {
      if (c->heldout.is_null()) c->heldout = gate(c->m, req.heldout_split, "heldout");
      if (!c->heldout.is_object()) break;  // budget spent
      if (!c->heldout.value("accepted", false) || c->heldout.value("speedup", 0.0) < need) continue;
      tiers[bucket] = {{"manifest", c->m.id},
                       {"speedup", c->speedup()},
                       {"psnr", c->psnr()},
                       {"ssim", c->ssim()},
                       {"family", c->m.family},
                       {"flags", c->m.flags},
                       {"heldout_accepted", true},
                       {"heldout_speedup", c->heldout.value("speedup", 0.0)},
                       {"heldout_psnr", c->heldout.value("psnr", 0.0)},
                       {"resolved_manifest", gates::to_json(c->m)}};
      break;
    }
  }
  std::fprintf(stderr, "\n");

  // 6. The report.
  json report = {{"model", req.load.model},
                 {"weights", worker.weights_label()},
                 {"device", worker.device().is_cuda() ? "cuda" : "cpu"},
                 {"device_name", runtime::device_name(worker.device())},
                 {"build", gates::Worker::build_id()},
                 {"official_config", official},
                 {"config", gates::to_json(base.config)},
                 {"split", req.split},
                 {"heldout_split", req.heldout_split},
                 {"gate_runs", gate_runs},
                 {"budget", {{"trials", req.budget_trials}, {"minutes", req.budget_minutes}}},
                 {"elapsed_s", std::chrono::duration<double>(Clock::now() - start).count()},
                 {"baseline", {{"manifest", base.id}, {"seconds", base_seconds}}},
                 {"tiers", tiers},
                 {"candidates", json::array()}};
  for (const auto& c : cands) {
    json verdicts = json::object();
    if (c.val.contains("gates"))
      for (const auto& [g, x] : c.val["gates"].items()) verdicts[g] = {{"pass", x.value("pass", false)}, {"reason", x.value("reason", "")}};
    json entry = {{"id", c.m.id},           {"family", c.m.family},   {"speedup", c.speedup()},
                  {"passed_all_but_official_config", c.survived_reduced()},
                  {"psnr", c.psnr()},       {"ssim", c.ssim()},       {"accepted", c.accepted()},
                  {"verdicts", verdicts},   {"flags", c.m.flags},     {"lossless", c.m.lossless},
                  {"gated", !c.val.is_null()}, {"failure_signature", c.get("failure_signature", std::string())}};
    if (c.heldout.is_object()) entry["heldout"] = {{"accepted", c.heldout.value("accepted", false)}, {"speedup", c.heldout.value("speedup", 0.0)}};
    report["candidates"].push_back(entry);
  }
  write_reports(out.string(), report);
  return (out / "report.json").string();
}

}  // namespace autooptim::orchestrator
