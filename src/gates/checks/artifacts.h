#pragma once
// Gate 1, artifacts: every run finished and wrote finite pixels in time, and every video file of the
// split is there, of the declared size.
#include <string>
#include <vector>

#include "gates/gate_check.h"
#include "gates/gate_evidence.h"

namespace autooptim::gates {

// video_problems: per clip of evidence.clips, what went wrong writing or probing its video ("" when
// nothing did; the timed pairs' clips write none).
GateCheck check_artifacts(const GateEvidence& evidence, const std::vector<std::string>& video_problems);

}  // namespace autooptim::gates
