#pragma once
// The verdict from its checks: accepted when every check passes, else the failure signature of the first
// failing check in the order that names a rejection best.
#include "gates/gate.h"

namespace autooptim::gates {

// Sets verdict.accepted and verdict.failure_signature from verdict.checks.
void decide_verdict(GateVerdict& verdict);

}  // namespace autooptim::gates
