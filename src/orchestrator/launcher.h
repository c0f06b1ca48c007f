#pragma once
// Who starts the run's workers. The orchestrator and the executors only talk to workers through files in
// the run folder (src/workers/protocol.h, docs/workers.md), so a launcher's one job is to get
// `autooptim worker --serve RUN --worker-id ID [model options]` processes running somewhere that can see
// RUN, to notice when one dies, and to stop them at the end:
//   local  fork/exec on this host (workers::LocalLauncher: one per GPU, or N on the CPU)
//   slurm  a Slurm job array submitted with sbatch, one task per worker, tracked with squeue/sacct,
//          cancelled with scancel; a task that dies or is pre-empted is replaced by a new submission
//          (its requests are re-queued by the protocol's janitor, so nothing finished is lost)
#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "workers/launcher.h"

namespace autooptim::orchestrator {

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual void start() = 0;
  // Looks at the workers (cheap to call often; the Slurm launcher asks Slurm at most every few
  // seconds). Returns the ids of workers that died since the last call; the launcher replaces them while
  // it still may.
  virtual std::vector<std::string> check() = 0;
  // True when no worker is running or waiting to run and none will be started again.
  virtual bool all_gone() const = 0;
  // Why a worker failed: the last line of its log.
  virtual std::string last_log_line(const std::string& id) const = 0;
  // Asks every worker to leave (RUN/stop), waits up to grace_s, then kills / cancels what is left.
  virtual void stop(double grace_s = 30) = 0;
  // For the report: {"kind", ...; the Slurm launcher adds its job ids, each task's state and node, and
  // every death and replacement}.
  virtual nlohmann::json describe() const = 0;
  // From now on a worker that dies is not replaced (the run is being interrupted or is ending).
  virtual void no_restarts() = 0;
  // Every worker id this launcher started (replacements included), in start order.
  virtual std::vector<std::string> worker_ids() const = 0;
  // Peak resident memory (kB) of worker processes that exited, where the launcher can know it.
  virtual std::map<std::string, long> exited_max_rss_kb() const { return {}; }
};

// The local launcher (workers::LocalLauncher: fork/exec on this host, restarts a worker that dies).
class LocalWorkers : public Launcher {
 public:
  LocalWorkers(std::string run_dir, std::vector<std::string> model_cli, std::vector<workers::WorkerSlot> slots,
               int max_restarts = 2);
  void start() override { l_.start(); }
  std::vector<std::string> check() override { return l_.check(); }
  bool all_gone() const override { return l_.all_gone(); }
  std::string last_log_line(const std::string& id) const override { return l_.last_log_line(id); }
  void stop(double grace_s = 30) override { l_.stop(grace_s); }
  nlohmann::json describe() const override;
  void no_restarts() override { l_.no_restarts(); }
  std::vector<std::string> worker_ids() const override;
  std::map<std::string, long> exited_max_rss_kb() const override { return l_.exited_max_rss_kb(); }

 private:
  workers::LocalLauncher l_;
};

// One command's outcome (the Slurm tools are run without a shell).
struct CommandResult {
  int status = -1;  // exit status; -1 could not start or was killed
  std::string out, err;
};
// Runs argv[0] (looked up on PATH) with argv, capturing stdout and stderr; gives up after timeout_s.
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s = 60);

struct SlurmOptions {
  std::string run_dir;                   // the run folder (made absolute): must be on a file system the nodes share
  std::string binary;                    // the autooptim binary the tasks run (default: this process's)
  std::vector<std::string> model_cli;    // --model ... --device ... given to every worker
  int64_t workers = 1;                   // array tasks
  std::string partition;                 // -p (empty: the cluster's default)
  int64_t gpus_per_worker = 0;           // --gres=gpu:G (0: a CPU worker)
  int64_t cpus_per_worker = 1;           // --cpus-per-task, and the worker's --threads
  std::string time_limit;                // --time (empty: the partition's)
  std::vector<std::string> sbatch_args;  // anything else for sbatch (--account=..., --qos=..., --constraint=...)
  int max_resubmits = -1;                // replacements for dead tasks over the run (-1: 2 per worker)
  double poll_s = 2;                     // how often check() asks squeue
};

class SlurmLauncher : public Launcher {
 public:
  explicit SlurmLauncher(SlurmOptions o);
  ~SlurmLauncher() override;
  // Writes RUN/slurm/workers.sbatch and submits it as an array of `workers` tasks. Throws Error with
  // sbatch's message when the submission fails (no Slurm, a wrong partition).
  void start() override;
  std::vector<std::string> check() override;
  bool all_gone() const override;
  std::string last_log_line(const std::string& id) const override;
  void stop(double grace_s = 30) override;
  nlohmann::json describe() const override;
  void no_restarts() override { o_.max_resubmits = resubmits_; }
  std::vector<std::string> worker_ids() const override;

  // The worker id of array task `task` of job `job` ("slurm-<job>-<task>": unique in the run, and
  // names the Slurm task it runs in).
  static std::string worker_id(const std::string& job, int64_t task);
  // The batch script submitted (for the report and for users who want to submit it by hand).
  std::string script_path() const;
  std::vector<std::string> job_ids() const;

 private:
  struct Task {
    std::string job, worker;
    int64_t index = 0;
    std::string state = "SUBMITTED", node, reason;
    bool ended = false, reported = false;
  };
  std::string submit(const std::string& array_spec);
  void refresh(bool force);
  void add_event(const std::string& worker, const std::string& what);
  SlurmOptions o_;
  std::vector<Task> tasks_;
  std::vector<std::string> jobs_;
  nlohmann::json events_ = nlohmann::json::array();
  int resubmits_ = 0;
  double last_poll_ = -1e9;
  bool stopping_ = false, stopped_ = false;
};

}  // namespace autooptim::orchestrator
