#pragma once
// What the gate measures beside the clips to defend itself (docs/gate-defences.md): the process's
// threads and CPU time around every run (work done outside the timed windows), and the records of the
// baseline's stage times on this machine (a slowed baseline).
#include <sys/types.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/cpu_clock.h"

namespace autooptim::gates {

// ---- Threads and CPU time of this process --------------------------------------------------------

int thread_count();  // entries of /proc/self/task
std::vector<pid_t> thread_ids();
using base::process_cpu_seconds;       // CLOCK_PROCESS_CPUTIME_ID: every thread, living or exited
double thread_cpu_seconds(pid_t tid);  // one thread of this process; < 0 when it is gone
double this_thread_cpu_seconds();
int usable_cores();  // the CPUs this process may run on (its affinity mask)

struct ProcessSample {
  double process_cpu_s = 0;  // the whole process
  double main_cpu_s = 0;     // the thread that runs the gate
  double own_cpu_s = 0;      // the harness's own threads (see ProcessMonitor::adopt_current_threads)
  int threads = 0;
  double wall_s = 0;  // the monotonic clock
  // The CPU seconds of the candidate's sandboxed generation worker (gates/sandboxed_worker.h) so far; negative
  // when the candidate runs in this process.
  double worker_cpu_s = -1;
  double foreign_cpu_s() const { return process_cpu_s - own_cpu_s; }  // every other thread's
};

// The harness's own threads: those alive before the process's first generation, once its compute pools
// exist (the worker warms them, then captures). Captured once per process, the first call wins: a thread
// born in any generation since, whatever its manifest, is never the harness's (a thread a candidate started
// in a trial before the gate would otherwise pass for one; docs/gate-defences.md).
void capture_harness_threads();
std::vector<pid_t> harness_thread_ids();  // empty until captured

// Samples the process before and after each run. The adopted threads are the harness's own; the CPU time
// of every other thread is "foreign": a candidate's thread that outlives its run.
class ProcessMonitor {
 public:
  void adopt_current_threads();
  void adopt(const std::vector<pid_t>& ids);  // those of `ids` still alive
  ProcessSample sample();
  int adopted_threads() const { return static_cast<int>(own_.size()); }

 private:
  std::map<pid_t, double> own_;  // thread id -> CPU seconds when last seen
};

// ---- Records of the baseline's times on this machine ---------------------------------------------

// A small JSON file of the baseline's measured stage times and efficiency per machine, build flavour,
// model, weights, configuration, device and dtype (the key), each entry naming its build. Read and
// rewritten whole (atomically, by rename) after each gate that trusted its baseline.
class BaselineRecords {
 public:
  explicit BaselineRecords(std::string path);
  const std::string& path() const { return path_; }
  std::vector<nlohmann::json> entries(const std::string& key) const;
  // Adds an entry under key (with its identity, for a reader), keeping the newest `keep` entries.
  void append(const std::string& key, const nlohmann::json& identity, const nlohmann::json& entry, size_t keep = 40);

 private:
  nlohmann::json load() const;
  std::string path_;
};

// The identity of this machine and build flavour: host name, CPU model, cores, the compiler, libtorch's
// version and whether assertions are compiled in (a Debug build is another flavour, not a slowdown).
nlohmann::json machine_identity();

}  // namespace autooptim::gates
