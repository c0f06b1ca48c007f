#pragma once
// Gate 4, off_identity: the candidate's build with its technique flags off reproduces the baseline's
// output (bit for bit, or within lossless_psnr where the device is nondeterministic) and its time.
#include "gates/gate_check.h"
#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"

namespace autooptim::gates {

GateCheck check_off_identity(const GateEvidence& evidence, const GateSettings& settings);

}  // namespace autooptim::gates
