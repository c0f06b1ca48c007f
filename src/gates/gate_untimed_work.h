#pragma once
// Work the candidate did outside its own timed windows (docs/gate-defences.md): the CPU time of threads
// other than the harness's own during the baseline's runs and between runs, a warm-up beyond two timed
// runs, device work left queued at a window's start, and threads of its own still alive after its runs.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"

namespace autooptim::gates {

struct UntimedWork {
  nlohmann::json report = nlohmann::json::object();  // integrity.untimed_work
  std::vector<std::string> problems;                 // each a reason for the authenticity check
};

// candidate_median_s: the median of the candidate's timed runs.
UntimedWork audit_untimed_work(const GateSequence& sequence, double candidate_median_s, const GateSettings& settings);

}  // namespace autooptim::gates
