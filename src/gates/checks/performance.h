#pragma once
// Gate 3, performance: faster than the baseline by more than the noise, no run below the physical floor
// of the forwards it ran, and no caching across requests (the duplicate-prompt audit costs and gives the
// same as the first timed pair).
#include "gates/gate_check.h"
#include "gates/gate_evidence.h"

namespace autooptim::gates {

GateCheck check_performance(const GateEvidence& evidence);

}  // namespace autooptim::gates
