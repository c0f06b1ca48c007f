#pragma once
// The worker process: `autooptim worker --serve RUN --worker-id ID [model options] [--threads N]`.
// Registers in RUN/workers/ID, loads the model once, then claims requests from RUN/queue one at a time
// (protocol.h) until RUN/stop or RUN/workers/ID/stop appears, SIGTERM/SIGINT arrive (the request in
// progress goes back to the queue), or it has been idle for idle_exit_s.
#include <string>

#include "runtime/models.h"

namespace autooptim::workers {

struct ServeOptions {
  std::string run_dir;
  std::string worker_id;
  runtime::LoadRequest load;
  int64_t threads = 0;  // CPU threads (0: libtorch's default)
  double heartbeat_s = 1.0;
  double idle_exit_s = 0;    // 0: never leave for idleness
  int64_t max_requests = 0;  // 0: no limit (tests: leave after k requests)
  // Trials' baseline runs: "auto" (kept and reused on a CUDA device), "reuse" or "fresh" (workers/trial_baselines.h).
  std::string trial_baselines = "auto";
};

// Serves until told to stop; returns the process's exit status (0 stopped, 2 could not start).
int serve(const ServeOptions& options);

}  // namespace autooptim::workers
