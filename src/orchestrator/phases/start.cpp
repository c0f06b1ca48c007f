// The start of a run: the pinned baseline, the inputs checked, the run folder locked and the workers
// started, then what gating needs (the ledger's verdicts to resume, the gate settings).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <thread>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/json_file.h"
#include "base/strings.h"
#include "base/remove_tree.h"
#include "base/stop_signals.h"
#include "orchestrator/executor_records.h"
#include "orchestrator/phases/phases.h"
#include "runtime/models.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {

gates::Manifest run_baseline(const RunRequest& req) {
  // The harness's pinned one (never a file of anyone's choosing), with the reduced configuration applied
  // when asked for.
  gates::Manifest base = gates::pinned_baseline(req.load.model);
  // The installed manifests/<model>/baseline.json is a copy of the pinned baseline; one that differs
  // is refused rather than silently ignored (it would have been the denominator before).
  const fs::path installed = fs::path(req.manifests_dir) / req.load.model / "baseline.json";
  if (fs::exists(installed) &&
      gates::manifest_hash(gates::load_manifest(installed.string())) != gates::manifest_hash(base))
    throw Error(installed.string() + ": differs from the harness's pinned baseline of " + req.load.model +
                "; the baseline always comes from the harness (restore the file or drop --manifests-dir)");
  base.config = gates::with_sizes(base.config, req.frames, req.steps, req.height, req.width);
  return gates::parse_manifest(gates::to_json(base), "baseline with the run's configuration");
}

void check_inputs(RunState& s) {
  const RunRequest& req = s.req;
  // The held-out prompts' pin was checked when they were loaded, not at the first tier candidate.
  if (s.prompts.split(req.split).empty())
    throw Error("--split '" + req.split + "' holds no prompts in " + req.prompts_dir);
  if (s.prompts.split(req.heldout_split).empty())
    throw Error("--heldout-split '" + req.heldout_split + "' holds no prompts in " + req.prompts_dir);
  if (!req.load.weights_dir.empty())
    runtime::read_checkpoint_configs(req.load.weights_dir);  // before any process starts
  if (s.slurm && req.plan)
    throw Error(
        "--plan calibrates on this host's device: run it without --launcher slurm, on a node like the workers'");
  // Slurm's tasks get their devices from Slurm; local slots need this host's.
  if (!s.slurm) s.slots = workers::plan_slots(req.gpus, req.workers, req.gpu_count, req.cpu_cores);
}

workers::WorkerInfo start_workers(Launcher& launcher, workers::Client& client, Progress& progress, double timeout_s) {
  launcher.start();
  const auto t0 = Clock::now();
  while (true) {
    for (const auto& w : client.workers())
      if (w.state == "ready") return w;
    launcher.check();
    if (launcher.all_gone()) {
      std::string why;
      for (const auto& w : client.workers())
        if (w.state == "failed") why = w.registration.value("error", "");
      if (why.empty() && !launcher.worker_ids().empty()) why = launcher.last_log_line(launcher.worker_ids().front());
      throw Error("no worker could load the model: " + why);
    }
    // A cluster's queue may hold the workers back: waiting is bounded (timeout_s > 0).
    if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s)
      throw Error("no worker was ready after " + base::format_fixed(timeout_s, 2) +
                  " s: " + launcher.describe().dump());
    if (base::StopSignals::signal()) throw Error(interrupted_by("while the workers loaded the model"));
    progress.show("loading", 0, 0, 1.0, "workers loading the model");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string default_baseline_cache(const fs::path& out, const std::string& device,
                                   const std::function<const char*(const char*)>& env) {
  const std::string run_only = (out / "baseline-cache").string();
  if (device != "cuda") return run_only;
  const char* own = env("AUTOOPTIM_CACHE_DIR");
  if (own && *own) return (fs::path(own) / "baseline-cache").string();
  const char* xdg = env("XDG_CACHE_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "autooptim" / "baseline-cache").string();
  const char* home = env("HOME");
  if (home && *home) return (fs::path(home) / ".cache" / "autooptim" / "baseline-cache").string();
  return run_only;
}

namespace {

// Executors see the visible prompts only: a file of their own.
void write_visible_prompts(const RunState& s) {
  std::string text;
  const gates::PromptSet visible = gates::load_prompts(s.req.prompts_dir, false);
  for (const auto& p : visible.all())
    text += json{{"id", p.id}, {"category", p.category}, {"prompt", p.text}, {"splits", p.splits}}.dump() + "\n";
  gates::write_file_atomic(s.visible_path.string(), text);
}

// Requests left by an interrupted run were for processes that are gone. So were its workers: their
// registrations and claimed requests move aside (workers.previous/, for a post-mortem), or a new worker of
// the same id would run the dead run's claim and the janitor would take the new worker for the dead one
// (issue 38: --resume after kill -9 exited 2, "the baseline was not measured").
void clear_previous_workers(const fs::path& out) {
  for (const char* d : {"queue", "responses", "cancel"}) runtime::remove_tree(out / d);
  if (fs::exists(out / "workers")) {
    runtime::remove_tree(out / "workers.previous");
    std::error_code ec;
    fs::rename(out / "workers", out / "workers.previous", ec);
    if (ec) runtime::remove_tree(out / "workers");
  }
}

std::unique_ptr<Launcher> make_launcher(const RunState& s, workers::ClientOptions& co) {
  const RunRequest& req = s.req;
  if (!s.slurm) return std::make_unique<LocalWorkers>(s.out.string(), req.model_cli, s.slots, 2);
  SlurmOptions so;
  so.run_dir = fs::absolute(s.out).string();
  so.model_cli = req.model_cli;
  so.workers = req.workers;
  so.partition = req.slurm_partition;
  so.gpus_per_worker = req.gpus_per_worker;
  so.cpus_per_worker = req.cpus_per_worker;
  so.time_limit = req.slurm_time;
  so.sbatch_args = req.sbatch_args;
  // A pre-empted worker's replacement may wait in the queue: clients wait that long for one.
  co.no_worker_s = std::max(co.no_worker_s, req.slurm_start_timeout_s);
  return std::make_unique<SlurmLauncher>(so);
}

void start_in_folder(RunState& s) {
  const RunRequest& req = s.req;
  s.lock.emplace((s.out / "run.lock").string(), "--out folder " + s.out.string());
  if (!req.resume && fs::exists(s.out / "ledger.jsonl") && fs::file_size(s.out / "ledger.jsonl") > 0)
    throw Error(s.out.string() +
                ": already holds a run (ledger.jsonl); use --resume to continue it or choose another --out");
  fs::create_directories(s.out / "manifests" / req.load.model);
  base::write_json_file(s.base_path.string(), gates::to_json(s.base));
  write_visible_prompts(s);
  s.progress.line("starting " + std::to_string(s.slurm ? req.workers : static_cast<int64_t>(s.slots.size())) +
                  " worker(s)" + (s.slurm ? " as a Slurm job array" : "") + ": each loads " + req.load.model +
                  " once and serves every trial and gate run");
  for (const auto& line : stop_orphaned_executors(s.out)) s.progress.warn(line);  // before they queue more
  clear_previous_workers(s.out);
  workers::ClientOptions co;
  co.dead_after_s = req.worker_dead_after_s;
  co.no_worker_s = 60;
  s.launcher = make_launcher(s, co);
  s.client.emplace(s.out.string(), "orchestrator", co);
  s.first_worker = start_workers(*s.launcher, *s.client, s.progress, s.slurm ? req.slurm_start_timeout_s : 0);
}

}  // namespace

void open_run(RunState& s) {
  // One run per folder at a time: a second `run` or `--resume` beside a live one would gate the same
  // candidates twice and interleave their ledger rows.
  const bool created_out = !fs::exists(s.out);
  std::set<std::string> before;  // what the folder held, so a failed start removes only what it added
  if (!created_out)
    for (const auto& e : fs::directory_iterator(s.out)) before.insert(e.path().filename().string());
  fs::create_directories(s.out);
  s.base_path = s.out / "manifests" / s.req.load.model / "baseline.json";
  s.visible_path = s.out / "prompts-visible.jsonl";
  try {
    start_in_folder(s);
  } catch (...) {
    // Nothing of the run was written yet: remove what this call added (the lock file last).
    if (s.launcher) s.launcher->stop(5);
    s.launcher.reset();
    s.lock.reset();
    std::error_code ec;
    if (created_out) {
      runtime::remove_tree(s.out, ec);
    } else {
      for (const auto& e : fs::directory_iterator(s.out, ec))
        if (!before.count(e.path().filename().string())) runtime::remove_tree(e.path(), ec);
    }
    throw;
  }
}

void resume_verdicts(RunState& s) {
  // A row that does not read as a verdict is not resumed (its manifest is gated again), and says why.
  int64_t n = 0;
  for (const auto& row : s.ledger->read_all()) {
    ++n;
    if (!row.is_object() || !same_gate_environment(row, s.first_worker)) continue;
    try {
      const GateRecord v = GateRecord::read(row, "ledger row " + std::to_string(n));
      s.done[{v.manifest_hash, v.split}] = v;
    } catch (const std::exception& e) {
      s.progress.warn(std::string(e.what()) + ": not resumed");
    }
  }
}

void prepare_gating(RunState& s) {
  const RunRequest& req = s.req;
  fs::create_directories(s.out / "outbox");
  fs::create_directories(s.out / "gates");
  s.ledger.emplace((s.out / "ledger.jsonl").string());
  // Prompt id -> category, for the report's per-category quality (held-out ids resolved by the gate's own
  // files); the visible prompts' words too, for the report's clips (held-out texts stay out of every report).
  const auto& visible = gates::visible_splits();
  for (const auto& p : s.prompts.all()) {
    s.categories[p.id] = p.category;
    if (!p.splits.empty() && std::find(visible.begin(), visible.end(), p.splits.front()) != visible.end())
      s.prompt_texts[p.id] = p.text;
  }
  resume_verdicts(s);

  s.gs = req.gate;
  s.gs.prompts_dir = fs::absolute(req.prompts_dir).string();
  s.gs.baseline_config = s.base.config;  // the pinned baseline at this run's configuration
  s.cache = fs::absolute(req.baseline_cache.empty() ? default_baseline_cache(s.out, s.first_worker.device, std::getenv)
                                                    : req.baseline_cache)
                .string();
  if (req.baseline_cache.empty() && s.first_worker.device == "cuda")
    s.progress.line("baseline cache: " + s.cache + " (this machine's GPU runs share it; --baseline-cache to choose)");
  s.gs.cache_dir = (fs::path(s.cache) / "outputs").string();
  if (s.first_worker.device == "cuda") s.gs.exact_off_identity = false;
  s.gate_settings = gates::settings_to_json(s.gs);
  s.gate_settings["baseline_manifest"] = gates::to_json(s.base);  // the worker reads the baseline's config from it
  // How many prompts a gate judges on the split and on the held-out split (max_prompts; a tier's held-out
  // confirmation covers --heldout-max-prompts of the held-out split, default all).
  const auto judged = [](int64_t all, int64_t max) { return max > 0 ? std::min(max, all) : all; };
  s.split_prompts = s.prompts.split(req.split);
  s.split_all = static_cast<int64_t>(s.split_prompts.size());
  s.heldout_all = static_cast<int64_t>(s.prompts.split(req.heldout_split).size());
  s.split_used = judged(s.split_all, s.gs.max_prompts);
  s.heldout_used = judged(s.heldout_all, req.heldout_max_prompts);
  if (s.gs.max_prompts > 0 && s.split_all > s.gs.max_prompts)
    s.split_prompts.resize(static_cast<size_t>(s.gs.max_prompts));
  s.screen_min =
      req.screen_min_speedup >= 0 ? req.screen_min_speedup : (s.official ? tier_buckets().front().second : 0.0);
}

}  // namespace autooptim::orchestrator
