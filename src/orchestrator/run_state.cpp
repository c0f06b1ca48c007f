#include "orchestrator/run_state.h"

#include <algorithm>

#include "base/stop_signals.h"
#include "base/utc_time.h"

namespace autooptim::orchestrator {

using nlohmann::json;

const std::vector<std::pair<std::string, double>>& tier_buckets() {
  static const std::vector<std::pair<std::string, double>> b = {{"1.5x", 1.5}, {"2x", 2.0}, {"3x", 3.0}, {"4x", 4.0}};
  return b;
}

bool ranks_above(const Candidate& a, const Candidate& b) {
  static const GateRecord ungated;  // 0 for both
  return ranks_above(a.val ? *a.val : ungated, b.val ? *b.val : ungated);
}

std::string slug(const std::string& id) {
  std::string s = id;
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

std::string interrupted_by(const std::string& when) {
  return std::string("interrupted by ") + signal_name(base::StopSignals::signal()) + " " + when;
}

json gate_environment_of(const workers::WorkerInfo& w) {
  if (w.registration.contains("gate_environment") && w.registration["gate_environment"].is_object())
    return w.registration["gate_environment"];
  return {{"build", gates::Worker::build_id()}, {"device", w.device}};
}

bool same_gate_environment(const json& row, const workers::WorkerInfo& w) {
  const json env = gate_environment_of(w);  // a named value: items() of a temporary would dangle
  for (const auto& [k, v] : env.items())
    if (!row.contains(k) || row[k] != v) return false;
  return true;
}

RunState::RunState(const RunRequest& request, gates::Manifest baseline, gates::PromptSet every_prompt)
    : req(request),
      out(request.out_dir),
      start(Clock::now()),
      started_at(base::utc_timestamp()),
      progress(start, request.budget_minutes * 60.0),
      base(std::move(baseline)),
      official(base.config == gates::official_config(base.model)),
      prompts(std::move(every_prompt)),
      slurm(request.launcher == "slurm") {}

size_t RunState::worker_count() const {
  return static_cast<size_t>(std::max<int64_t>(1, slurm ? req.workers : static_cast<int64_t>(slots.size())));
}

}  // namespace autooptim::orchestrator
