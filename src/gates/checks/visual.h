#pragma once
// Gate 6, visual: no artifact the baseline's clip does not have, and (for procedural scenes of one
// object) the object the baseline shows, with its colour and motion.
#include <nlohmann/json.hpp>

#include "gates/gate_check.h"
#include "gates/gate_evidence.h"

namespace autooptim::gates {

struct VisualResult {
  GateCheck check;
  nlohmann::json clips = nlohmann::json::object();  // per clip: both visual reports (quality.json)
};

// objects: whether to compare each clip's object track with the baseline's.
VisualResult check_visual(const GateEvidence& evidence, bool objects);

}  // namespace autooptim::gates
