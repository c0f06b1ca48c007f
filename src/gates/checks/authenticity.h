#pragma once
// The authenticity check: the technique engaged as its flags say, did the work its counters claim and no
// more than its timed runs show, and nothing it returned was the baseline's own output
// (docs/gate-defences.md).
#include <nlohmann/json.hpp>

#include "gates/gate_check.h"
#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"
#include "gates/gate_timed_clocks.h"
#include "gates/gate_untimed_work.h"
#include "gates/manifest.h"

namespace autooptim::gates {

struct AuthenticityResult {
  GateCheck check;
  nlohmann::json seen_vs_fresh;  // integrity.seen_vs_fresh
};

// clocks: the windows' CPU time against their wall time and claimed work (reconcile_timed_clocks).
AuthenticityResult check_authenticity(const GateEvidence& evidence, const Manifest& candidate,
                                      const UntimedWork& untimed, const GateSettings& settings,
                                      const TimedClocks& clocks = {});

}  // namespace autooptim::gates
