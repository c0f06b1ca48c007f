// The workers while the run goes on: deaths recorded (and restarts left to the launcher), and what each
// busy worker is doing, for the progress line.
#include "base/stop_signals.h"
#include "base/utc_time.h"
#include "orchestrator/phases/phases.h"

using nlohmann::json;

namespace autooptim::orchestrator {

void keep_workers(RunState& s) {
  if (base::StopSignals::signal()) s.launcher->no_restarts();
  for (const auto& id : s.launcher->check()) {
    s.worker_events.push_back(base::utc_timestamp() + ": worker " + id + " died (" + s.launcher->last_log_line(id) +
                              "); its requests were re-queued and it was restarted if it could be");
    s.progress.warn("worker " + id + " died; its requests were re-queued");
  }
}

std::string stage_line(RunState& s) {
  std::string line;
  for (const auto& w : s.client->workers())
    if (w.heartbeat.is_object() && w.heartbeat.value("request", json()).is_string())
      line += (line.empty() ? "" : "; ") + w.id + ": " + w.heartbeat.value("stage", "");
  return line;
}

}  // namespace autooptim::orchestrator
