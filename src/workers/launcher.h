#pragma once
// The local launcher: starts worker processes on this host (one per GPU with CUDA_VISIBLE_DEVICES set to
// that GPU, or N on the CPU with the cores shared out), restarts one that dies (its requests are
// re-queued by the janitor first), and stops them all at the end. Any other launcher (Slurm) only has
// to start `autooptim worker --serve RUN --worker-id ID ...` processes that can see RUN.
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace autooptim::workers {

struct WorkerSlot {
  std::string id;            // gpu0, gpu1, ... or cpu0, cpu1, ...
  std::string cuda_visible;  // CUDA_VISIBLE_DEVICES for it ("" on the CPU)
  int64_t threads = 0;       // CPU threads (0: default)
};

// The slots for --gpus (all | 0,1,...) or --workers N: Error for a bad list or a GPU that is not there.
// gpu_count: how many GPUs this host has (CUDA_VISIBLE_DEVICES applied).
std::vector<WorkerSlot> plan_slots(const std::string& gpus, int64_t workers, int64_t gpu_count, int64_t cpu_cores);

class LocalLauncher {
 public:
  // model_cli: the model options passed to every worker (--model ... --device ...).
  LocalLauncher(std::string run_dir, std::vector<std::string> model_cli, std::vector<WorkerSlot> slots,
                int max_restarts = 2);
  ~LocalLauncher();  // stop()
  void start();
  // Reaps workers that exited: one that died while the run goes on is restarted (at most max_restarts
  // times per slot). Returns the ids that died since the last call.
  std::vector<std::string> check();
  // True when no worker is alive and none can be restarted.
  bool all_gone() const;
  // From now on a worker that dies is not restarted (the run is being interrupted).
  void no_restarts() { max_restarts_ = 0; }
  // The last line of a worker's log (why it failed).
  std::string last_log_line(const std::string& id) const;
  // RUN/stop, then waits up to grace_s for every worker and kills what is left.
  void stop(double grace_s = 30);
  const std::vector<WorkerSlot>& slots() const { return slots_; }
  // Peak resident memory (kB) of each worker process that exited, from wait4.
  const std::map<std::string, long>& exited_max_rss_kb() const { return exited_rss_; }

 private:
  pid_t spawn(const WorkerSlot& s);
  std::string run_;
  std::vector<std::string> model_cli_;
  std::vector<WorkerSlot> slots_;
  int max_restarts_;
  std::map<pid_t, size_t> running_;
  std::map<size_t, int> restarts_;
  std::map<std::string, long> exited_rss_;
  bool stopped_ = false;
};

}  // namespace autooptim::workers
