#pragma once
// Part of the authenticity check: each clip's counters against the work its denoising loop and block
// stack really did, and the work floors every candidate (and each declared cache or sparse pattern) must
// reach (docs/gate-defences.md).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"
#include "gates/manifest.h"

namespace autooptim::gates {

struct ClipWorkAudit {
  nlohmann::json work = nlohmann::json::array();  // per clip: what the loop and the blocks ran
  std::vector<std::string> counter_problems;      // counters that claim more (or other) work than ran
  std::vector<std::string> floor_problems;        // work below a floor
  // A cache-family candidate's speedup against what the blocks it counts allow (null for any other candidate):
  // share of blocks, bound, allowed, speedup.
  nlohmann::json cost;
};

// tolerance: the relative timing tolerance of this gate (generous: a run or two may be disturbed).
ClipWorkAudit audit_clip_work(const GateEvidence& evidence, const Manifest& candidate, double tolerance,
                              const GateSettings& settings);

}  // namespace autooptim::gates
