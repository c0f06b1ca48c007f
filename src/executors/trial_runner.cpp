#include "executors/trial_runner.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "gates/generation_wire.h"
#include "base/error.h"
#include "base/remove_tree.h"
#include "workers/messages.h"

namespace fs = std::filesystem;

namespace autooptim::executors {

namespace {
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the stop flag is set from a signal handler");
}  // namespace

void TrialRunner::request_stop() { g_stop.store(true); }
bool TrialRunner::stop_requested() { return g_stop.load(); }

TrialRunner::TrialRunner(const ExecutorRequest& req, const gates::Manifest& base, std::vector<gates::Prompt> prompts)
    : req_(req), base_(base), prompts_(std::move(prompts)) {
  if (prompts_.empty()) throw Error("executor: no prompts to explore on");
  std::string run = req.serve_dir;
  if (!run.empty()) parent_ = static_cast<int>(getppid());
  if (run.empty()) {
    // Alone (not spawned by a run): a private worker in a temporary folder, so that this process still
    // holds no model and measures exactly as it would in a run.
    std::string tmpl = (fs::temp_directory_path() / "autooptim-executor-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw Error("executor: cannot make a temporary folder for its worker");
    private_dir_ = run = tmpl;
    private_worker_ = std::make_unique<workers::LocalLauncher>(
        run, req.worker_cli, std::vector<workers::WorkerSlot>{{"private0", "", 0}}, 0);
    private_worker_->start();
  }
  workers::ClientOptions co;
  if (private_worker_) co.no_worker_s = 5;  // our own worker: when it is gone it is gone
  client_ = std::make_unique<workers::Client>(run, "executor-" + req.executor_name(), co);
  // The device the workers hold (the search space depends on it): from the first registration.
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    bool found = false;
    for (const auto& w : client_->workers())
      if (w.state == "loading" || w.state == "ready") {
        on_gpu_ = w.device == "cuda";
        found = true;
        break;
      }
    if (found) break;
    if (private_worker_) {
      private_worker_->check();
      if (private_worker_->all_gone())
        throw Error("executor: its worker could not start: " + private_worker_->last_log_line("private0"));
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(600))
      throw Error("executor: no worker registered in " + run + " within 600 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void TrialRunner::while_waiting() const {
  if (private_worker_) private_worker_->check();
  if (parent_ != 0 && getppid() != parent_)
    throw Error("executor " + req_.executor_name() + ": the orchestrator (pid " + std::to_string(parent_) +
                ") died; the trial in progress is abandoned (--resume runs this family again)");
}

TrialRunner::~TrialRunner() {
  if (private_worker_) {
    private_worker_->stop(5);
    std::error_code ec;
    runtime::remove_tree(private_dir_, ec);
  }
}

std::vector<gates::Prompt> TrialRunner::first(int64_t n) const {
  n = std::clamp<int64_t>(n, 0, static_cast<int64_t>(prompts_.size()));
  return {prompts_.begin(), prompts_.begin() + n};
}

nlohmann::json TrialRunner::request(const std::string& kind, const nlohmann::json& flags, const std::string& label,
                                    const std::vector<gates::Prompt>& prompts, const workers::PluginRef& plugin) const {
  workers::TrialRequest r;
  r.kind = kind;
  r.base = base_;
  r.flags = flags;
  r.label = label;
  r.n = static_cast<int64_t>(prompts.size());
  r.prompts = prompts;
  r.plugin = plugin;
  return r.to_json();
}

std::vector<runtime::Trace> TrialRunner::traces(const nlohmann::json& flags, const std::string& label, int64_t n) {
  auto tick = [this] { while_waiting(); };
  const auto r = client_->call(request("traces", flags, label, first(n)), tick);
  std::vector<runtime::Trace> out;
  // Counters and ratio values come back as numbers: read back as counters, get() sees the same values.
  for (const auto& tj : workers::MessageReader(r.result, "traces result").array("traces"))
    out.push_back(gates::trace_from_json(tj, "the traces result's"));
  return out;
}

Trial TrialRunner::measure(const nlohmann::json& flags, const std::string& label, int64_t n) {
  return measure_on(flags, label, first(n));
}

Trial TrialRunner::measure_on(const nlohmann::json& flags, const std::string& label,
                              const std::vector<gates::Prompt>& prompts, const workers::PluginRef& plugin) {
  ++trials_;
  auto tick = [this] { while_waiting(); };
  const auto r = client_->call(request("trial", flags, label, prompts, plugin), tick);
  Trial t = Trial::from_json(r.result);
  t.flags = flags;
  t.label = label;
  return t;
}

}  // namespace autooptim::executors
