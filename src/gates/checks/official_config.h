#pragma once
// Gate 2, official_config: the candidate runs the model's official configuration (another one is
// measured, but can never win a tier).
#include "gates/gate_check.h"
#include "gates/manifest.h"

namespace autooptim::gates {

GateCheck check_official_config(const RunConfig& candidate, const RunConfig& official);

}  // namespace autooptim::gates
