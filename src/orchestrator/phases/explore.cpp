// The exploration: one `autooptim executor` process per family, in parallel; each searches with trials
// on the workers and writes the manifests it proposes to its outbox (OUT/outbox/<family>/).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "base/json_lines.h"
#include "base/log.h"
#include "base/spawn.h"
#include "base/stop_signals.h"
#include "base/utc_time.h"
#include "gates/agent_names.h"
#include "orchestrator/agent_report.h"
#include "orchestrator/executor_records.h"
#include "orchestrator/phases/phases.h"
#include "workers/trial_result.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {

// Half of what the budget has left when the exploration begins (the baseline's phase, the longest on a machine
// without the baseline's verdict cached, comes first), counted from the run's start.
double exploration_deadline_s(double budget_s, double began_s) {
  return began_s + 0.5 * std::max(0.0, budget_s - began_s);
}

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Spawns `autooptim executor ...` for one family; its output goes to log. The child stays in the run's
// process group (a ^C at the terminal or a scheduler's signal to the group reaches it too), gets
// SIGTERM when the orchestrator dies (PR_SET_PDEATHSIG), and starts with SIGINT/SIGTERM blocked: a
// signal that arrives before the executor has installed its handler waits for it instead of killing
// the process with an empty log. The log starts with a line written before exec for the same reason.
pid_t spawn_executor(const std::vector<std::string>& args, const fs::path& log_path, const std::string& family) {
  runtime::SelfSpawn s;
  s.args = args;
  s.env = runtime::environment_with({"AUTOOPTIM_LOG_LEVEL"},
                                    {std::string("AUTOOPTIM_LOG_LEVEL=") + log::level_name(log::level())});
  s.log_file = log_path.string();
  s.header = "autooptim executor " + family + ": starting (" + base::utc_timestamp() + "):";
  for (const auto& a : args) s.header += " " + a;
  s.header += "\n";
  s.what = "an executor";
  return runtime::spawn_self(s);
}

// What a family's executor measured (outbox/<family>/trials.jsonl) and proposed.
json explored(const fs::path& box) {
  json trials = json::array();
  for (const json& t : base::read_json_lines(box / "trials.jsonl")) {  // a killed executor's torn line skipped
    try {
      const workers::TrialResult r = workers::TrialResult::from_json(t);
      trials.push_back({{"label", r.label},
                        {"speedup", r.speedup},
                        {"psnr", r.psnr_min},
                        {"prompts", r.prompts},
                        {"engaged", r.engaged()}});
    } catch (const std::exception& e) {
      log::warn(box.string() + "/trials.jsonl: " + e.what() + ": left out of the report");
    }
  }
  json proposed = json::array();
  std::error_code ec;
  if (fs::is_directory(box, ec))
    for (const auto& e : fs::directory_iterator(box, ec))
      if (e.path().extension() == ".json" && e.path().filename().string().rfind(".tmp", 0) != 0)
        proposed.push_back(e.path().stem().string());
  std::sort(proposed.begin(), proposed.end());
  return {{"trials", trials}, {"proposed", proposed}};
}

// The executors of one run, from their start to the last one's end. At the exploration deadline SIGTERM
// lets each executor finish its trial in progress and propose from what it measured; one still busy
// after the grace period is killed (its proposals stay). An interruption does the same with a short
// grace, and clears the executors' done markers so that --resume explores again.
class Exploration {
 public:
  explicit Exploration(RunState& s)
      : s_(s),
        grace_s_(std::clamp(s.req.budget_minutes * 60.0 * 0.1, 10.0, 120.0)),
        deadline_s_(exploration_deadline_s(s.req.budget_minutes * 60.0, seconds_since(s.start))) {}

  void start_all() {
    for (const auto& name : executor_names(s_.req)) start(name);
  }

  void wait_all() {
    auto last_check = Clock::now();
    while (!running_.empty()) {
      int status = 0;
      const pid_t pid = reap(status);
      if (std::chrono::duration<double>(Clock::now() - last_check).count() > 1.0) {
        last_check = Clock::now();
        s_.client->requeue_dead();
        keep_workers(s_);
      }
      if (pid > 0 && running_.count(pid)) {
        ended(pid, status);
        continue;
      }
      if (stop_or_kill()) break;
      s_.progress.show(stopped_at_ ? "stopping" : "explore", s_.gate_runs, s_.req.budget_trials, s_.best,
                       stage_line(s_));
      std::this_thread::sleep_for(std::chrono::milliseconds(stopped_at_ ? 100 : 300));
    }
  }

 private:
  json& row(const std::string& fam) { return s_.executors[index_[fam]]; }

  void start(const std::string& fam) {
    const RunRequest& req = s_.req;
    const fs::path box = s_.out / "outbox" / fam;
    index_[fam] = s_.executors.size();
    s_.executors.push_back({{"family", fam}, {"log", "outbox/" + fam + ".log"}, {"state", "skipped"}, {"reason", ""}});
    if (req.resume && fs::exists(box / "done")) {
      s_.executors.back()["reason"] = "finished in an earlier run (outbox/" + fam + "/done)";
      return;
    }
    if (base::StopSignals::signal()) {
      s_.executors.back()["state"] = "interrupted";
      s_.executors.back()["reason"] = "not started: the run was interrupted";
      return;
    }
    fs::create_directories(box);
    fs::remove(box / "done");
    const std::vector<std::string> args = executor_args(fam, box);
    const pid_t pid = spawn_executor(args, s_.out / "outbox" / (fam + ".log"), fam);
    running_[pid] = fam;
    record_executor(s_.out, fam, pid);
    s_.executors.back()["state"] = "running";
  }

  // `autooptim executor ...` for the executor called `name` (a family, or "agent-<family>").
  std::vector<std::string> executor_args(const std::string& name, const fs::path& box) {
    const RunRequest& req = s_.req;
    std::vector<std::string> args = {"autooptim", "executor"};
    const RunRequest::Agent* agent = nullptr;
    for (const auto& a : req.agents)
      if (gates::agent_executor_name(a.family) == name) agent = &a;
    if (agent)
      append_agent_args(args, *agent);
    else
      args.insert(args.end(), {"--family", name});
    args.insert(args.end(), req.model_cli.begin(), req.model_cli.end());
    args.insert(args.end(), {"--base", s_.base_path.string(), "--prompts", s_.visible_path.string(), "--outbox",
                             box.string(), "--budget-trials", std::to_string(req.executor_trials), "--min-psnr",
                             std::to_string(req.gate.min_psnr), "--serve", fs::absolute(s_.out).string()});
    return args;
  }

  // An agent's executor: its command, its sandbox's openings, its brief, its folder and its deadline (the
  // exploration's).
  void append_agent_args(std::vector<std::string>& args, const RunRequest::Agent& a) {
    const RunRequest& req = s_.req;
    const double left_s = deadline_s_ - seconds_since(s_.start);
    args.insert(args.end(),
                {"--agent-family", a.family, "--agent-command", a.command, "--agent-brief",
                 (fs::path(req.agent_briefs_dir) / (a.family + ".md")).string(), "--agent-dir",
                 fs::absolute(s_.out / "agents" / gates::agent_executor_name(a.family)).string(), "--agent-deadline-s",
                 std::to_string(std::max(1.0, left_s)), "--min-ssim", std::to_string(req.gate.min_ssim)});
    if (!req.agent_network.empty()) args.insert(args.end(), {"--agent-network", req.agent_network});
    for (const auto& e : req.agent_env) args.insert(args.end(), {"--agent-env", e});
    for (const auto& b : req.agent_binds) args.insert(args.end(), {"--agent-bind", b});
    // Decoys where the held-out prompts and the ledger are: an agent that looks there is named in the report.
    for (const auto& d : {fs::path(req.prompts_dir) / "heldout.jsonl",
                          fs::path(req.agent_briefs_dir).parent_path() / "heldout.jsonl", s_.out / "ledger.jsonl"})
      args.insert(args.end(), {"--agent-decoy", fs::absolute(d).lexically_normal().string()});
    if (req.agent_unsandboxed) args.push_back("--agent-unsandboxed");
  }

  // An executor that exited (its pid, its peak memory kept), or 0.
  pid_t reap(int& status) {
    for (const auto& [p, fam] : running_) {
      struct rusage ru {};
      if (wait4(p, &status, WNOHANG, &ru) == p) {
        s_.executors_rss_kb = std::max(s_.executors_rss_kb, ru.ru_maxrss);
        return p;
      }
    }
    return 0;
  }

  void finish(const std::string& fam, const std::string& state, const std::string& reason) {
    row(fam)["state"] = state;
    row(fam)["reason"] = reason;
    if (stopped_by_signal_) fs::remove(s_.out / "outbox" / fam / "done");
  }

  void ended(pid_t pid, int status) {
    const std::string fam = running_[pid];
    running_.erase(pid);
    forget_executor(s_.out, fam);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const std::string code = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                               : std::string("signal ") + std::to_string(WTERMSIG(status));
    if (!ok) {
      const std::string why = code + ", see outbox/" + fam +
                              ".log: " + runtime::last_log_line((s_.out / "outbox" / (fam + ".log")).string());
      finish(fam, stopped_by_signal_ ? "interrupted" : "failed", why);
      s_.progress.warn("executor " + fam + (stopped_by_signal_ ? " interrupted (" : " failed (") + why + ")");
      return;
    }
    finish(fam,
           stopped_by_signal_ ? "interrupted"
           : stopped_at_      ? "stopped"
                              : "finished",
           stopped_by_signal_ ? "stopped by the interruption"
           : stopped_at_      ? "stopped at the exploration budget"
                              : "finished its search");
    s_.progress.line("executor " + fam +
                     (stopped_by_signal_ ? " stopped (interrupted)"
                      : stopped_at_      ? " stopped at the exploration budget"
                                         : " finished"));
  }

  // SIGTERM at an interruption or the deadline, SIGKILL after the grace: true when every executor was
  // killed (the wait is over).
  bool stop_or_kill() {
    const auto now = Clock::now();
    if (base::StopSignals::signal() && !stopped_by_signal_) {
      stopped_by_signal_ = true;
      s_.progress.warn(std::string(signal_name(base::StopSignals::signal())) +
                       ": stopping the executors and writing the report of what was done");
      for (const auto& [p, fam] : running_) kill(p, SIGTERM);
      stopped_at_ = now;
    } else if (!stopped_at_ && std::chrono::duration<double>(now - s_.start).count() > deadline_s_) {
      for (const auto& [p, fam] : running_) kill(p, SIGTERM);
      stopped_at_ = now;
    } else if (stopped_at_ && std::chrono::duration<double>(now - *stopped_at_).count() > grace()) {
      kill_all();
      return true;
    }
    return false;
  }

  double grace() const { return stopped_by_signal_ ? kInterruptGraceS : grace_s_; }

  void kill_all() {
    for (const auto& [p, fam] : running_) {
      int status = 0;
      kill(p, SIGKILL);
      waitpid(p, &status, 0);
      finish(fam, stopped_by_signal_ ? "interrupted" : "killed",
             "still busy " + std::to_string(static_cast<int>(grace())) + " s after " +
                 (stopped_by_signal_ ? "the interruption" : "the exploration budget") + "; killed");
      s_.progress.line("executor " + fam + " killed: " + row(fam).value("reason", ""));
    }
    running_.clear();
  }

  static constexpr double kInterruptGraceS = 5.0;
  RunState& s_;
  const double grace_s_;
  const double deadline_s_;  // from the run's start: when the executors are told to stop
  std::map<pid_t, std::string> running_;
  std::map<std::string, size_t> index_;
  std::optional<Clock::time_point> stopped_at_;
  bool stopped_by_signal_ = false;
};

}  // namespace

std::vector<std::string> executor_names(const RunRequest& req) {
  std::vector<std::string> names;
  for (const auto& fam : req.families) {
    bool agent = false;
    for (const auto& a : req.agents) agent = agent || a.family == fam;
    if (!(agent && req.agent_only)) names.push_back(fam);
  }
  for (const auto& a : req.agents) names.push_back(gates::agent_executor_name(a.family));
  return names;
}

void explore_phase(RunState& s) {
  const auto explore_start = Clock::now();
  Exploration exploration(s);
  exploration.start_all();
  exploration.wait_all();
  s.explore_s = std::chrono::duration<double>(Clock::now() - explore_start).count();
  // Requests of executors that were killed are withdrawn (a worker would otherwise still run them).
  for (const auto& name : executor_names(s.req)) workers::cancel_client_requests(s.out.string(), "executor-" + name);
  for (auto& e : s.executors) {
    const std::string name = e.value("family", "");
    e["explored"] = explored(s.out / "outbox" / name);
    if (gates::is_agent_executor(name)) e["agent"] = agent_records(s.out, name);
  }
}

}  // namespace autooptim::orchestrator
