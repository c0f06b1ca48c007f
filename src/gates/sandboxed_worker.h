#pragma once
// A generation worker the gate does not trust (issue 42): `autooptim worker --generation-channel DIR
// [--plugin FILE]` in its own process on the same device, inside the OS sandbox (base/sandbox.h) where this
// machine has one. It sees the binary, its libraries, the weights and the plugin, read-only, and an empty
// workspace: not the run folder, the baseline cache, the ledger, the prompt files or other workers' folders.
// It loads the model before the gate starts timing and then gets one request at a time through two FIFOs
// (gates/generation_wire.h): the prompt's text and the seed arrive only when the gate's timer has started,
// and the gate stops its timer when the last byte of the clip has arrived. Every metric is computed from
// those frames; the worker's counters are its claim, held against what the gate observes (its own clock,
// the worker's CPU time outside its windows). The gate starts a fresh one for every gate run.
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/sandbox.h"
#include "gates/gate_settings.h"
#include "gates/generation_side.h"
#include "gates/generation_wire.h"
#include "runtime/models.h"

namespace autooptim::gates {

struct SandboxedWorkerSpec {
  runtime::LoadRequest load;  // model, weights, device and dtype, as this process's worker has them
  std::string plugin;         // the plugin file to load ("" for the pinned baseline's worker)
  std::string label;          // "candidate" or "baseline": names it in messages and its log
  // No OS sandbox (this machine has none): a plain child process, in its own process group. Said in the verdict.
  bool unsandboxed = false;
  double start_timeout_s = 3600;  // loading the model
  double run_timeout_s = 3600;    // one generation
};

class SandboxedWorker : public GenerationSide {
 public:
  explicit SandboxedWorker(SandboxedWorkerSpec spec);
  ~SandboxedWorker() override;  // asks it to stop, then kills what is left
  SandboxedWorker(const SandboxedWorker&) = delete;
  SandboxedWorker& operator=(const SandboxedWorker&) = delete;

  // Starts the process and has it load the plugin. Throws Error naming the problem (the sandbox could not
  // start, the plugin did not load, the worker died), with its log's last lines.
  void start();
  // Has it load the model (before any timed run).
  void load_model();
  // The plugin's techniques as the worker registered them (registry listing entries, with "group").
  nlohmann::json describe();

  RunOutput run(const Manifest& m, const Prompt& prompt, std::optional<int64_t> seed) override;
  RunOutput run_drawn(const Manifest& m, const std::vector<Prompt>& choices) override;
  double worker_cpu_seconds() override;
  // Its process is still running (a generation that failed by a timeout or a crash ends it).
  bool alive() const;
  // The limit of each later generation (a trial sets it from the baseline's time of the same prompt).
  void set_run_timeout(double seconds) { spec_.run_timeout_s = seconds; }
  void limit_run_seconds(double seconds) override { set_run_timeout(seconds); }

  // What the verdict records of it: how it was isolated, its load time, what it ran.
  nlohmann::json report() const;
  std::string log_path() const { return dir_ + "/worker.log"; }
  const std::string& plugin_sha256() const { return plugin_sha256_; }

 private:
  RunOutput run_timed(const Manifest& m, const std::vector<Prompt>& choices, std::optional<int64_t> seed, bool drawn);
  nlohmann::json request(const nlohmann::json& req, double timeout_s);
  // While an answer is awaited: why to give up (the worker ended, or `timeout_s` from t0 passed: "the ... worker
  // <past> N s"), "" to go on.
  WaitCheck give_up_after(std::chrono::steady_clock::time_point t0, double timeout_s, const std::string& past) const;
  std::string why_dead() const;
  std::string log_tail() const;

  SandboxedWorkerSpec spec_;
  std::string dir_;  // private folder: channel/ (the FIFOs), workspace/, the plugin's copy, the log
  std::string plugin_sha256_;
  std::unique_ptr<base::Sandbox> box_;
  int to_worker_ = -1, from_worker_ = -1;
  double load_s_ = 0;
  int64_t runs_ = 0;
};

// The sha256 of a plugin file, as a manifest pins it.
std::string plugin_file_sha256(const std::string& path);

// The two workers of the gate of a manifest that pins plugin `sha256`: the candidate's, which loads it, and the
// pinned baseline's, both started and with the model loaded. Throws Error when the gate was not given the
// plugin's file, or this machine has no OS sandbox and settings.plugin_without_sandbox is off.
struct PluginGateWorkers {
  std::unique_ptr<SandboxedWorker> candidate, baseline;
  nlohmann::json report() const;  // integrity.generation_workers
  void save_logs(const std::string& dir) const;
};
PluginGateWorkers start_plugin_workers(const runtime::LoadRequest& load, const std::string& sha256,
                                       const GateSettings& settings);

// One candidate worker that loads the plugin at `file`, started and with the model loaded: an executor's trials of
// the plugin, whose baseline runs in the caller's own worker. Throws as start_plugin_workers does.
std::unique_ptr<SandboxedWorker> start_plugin_candidate(const runtime::LoadRequest& load, const std::string& file,
                                                        bool without_sandbox, double run_timeout_s);

// Registers the techniques of the plugin at `path` in this process by their description (gates/plugin_schema.h),
// asked of a sandboxed worker that loads it; returns its sha256. What `gate --plugin` does before it reads a manifest.
std::string describe_plugin(const std::string& path, bool without_sandbox);
// The same, unless this process knows the plugin already (its sha256 registered): then only its sha256.
std::string ensure_plugin_described(const std::string& path, bool without_sandbox);

}  // namespace autooptim::gates
