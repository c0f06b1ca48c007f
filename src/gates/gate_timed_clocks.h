#pragma once
// A run's clocks against each other and against the work it claims (docs/gate-defences.md): no window may
// show more CPU time than the process's cores give in its wall time (a warped clock), and on a CPU device a
// candidate's timed run must have spent the CPU time that the blocks it claims to have run need at the
// calibrated rate (work done by another thread after the timer stopped, a clip handed over).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/gate_evidence.h"

namespace autooptim::gates {

struct TimedClocks {
  nlohmann::json report = nlohmann::json::object();  // integrity.timed_clocks
  std::vector<std::string> problems;                 // each a reason for the authenticity check
};

TimedClocks reconcile_timed_clocks(const GateEvidence& evidence);

}  // namespace autooptim::gates
