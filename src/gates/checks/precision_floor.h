#pragma once
// The precision floor of a lossless claim (GateSettings::precision_floor): split clips that miss the
// lossless PSNR still pass when they are as close to the precision control (the baseline one precision
// up) as the baseline's own clips are. Part of gate 5 (quality).
#include <opencv2/core.hpp>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"

namespace autooptim::gates {

// The control's clip of one split clip; error non-empty when the control run failed.
struct PrecisionControlClip {
  std::vector<cv::Mat> frames;
  std::string error;
};

struct PrecisionFloor {
  nlohmann::json details;  // control dtype, slacks, per clip margins, means
  std::string failure;     // why the floor does not hold ("" when it holds)
};

// short_clips: indices of the split clips below the lossless tolerance, in order; controls: their
// control clips in the same order, made by the gate run (it stops at the first that failed).
PrecisionFloor judge_precision_floor(const GateEvidence& evidence, const std::vector<size_t>& short_clips,
                                     const std::vector<PrecisionControlClip>& controls, const GateSettings& settings);

}  // namespace autooptim::gates
