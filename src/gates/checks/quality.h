#pragma once
// Gate 5, quality: each clip against the baseline's own clip of the same prompt and seed: the split at the
// official seed within the tolerance of the claim (lossless or lossy, or a lossless claim within the
// precision floor), and each timed pair (an unannounced audit) within its own.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gates/checks/precision_floor.h"
#include "gates/gate_check.h"
#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"

namespace autooptim::gates {

// Every clip against the baseline's, with the worst values and the clips that fall short.
struct QualityComparisons {
  nlohmann::json clips = nlohmann::json::object();  // per clip: its metrics (quality.json)
  double worst_psnr = 0, worst_ssim = 0, worst_audit_psnr = 0;
  std::string incomparable;                       // why a clip could not be compared ("" when all could)
  std::vector<size_t> short_of_need;              // split clips below the tolerance of the claim
  std::vector<std::pair<size_t, double>> audits;  // timed pairs' clips and their PSNR
  // The split clips whose lossless claim the precision control must decide (the gate run makes their
  // controls): short_of_need when the precision floor applies, else none.
  std::vector<size_t> need_precision_control;
};

QualityComparisons compare_quality(const GateEvidence& evidence, bool lossless, const GateSettings& settings);

// The mean PSNR (dB) and SSIM a split clip needs for the claim.
double needed_psnr(bool lossless, const GateSettings& settings);
double needed_ssim(bool lossless, const GateSettings& settings);

// Why this split clip fails the quality check whatever the rest of the gate shows ("" when it may pass):
// below what the claim needs, where nothing can rescue it (a lossy claim, or a lossless one without the
// precision floor). Fills `seen` with the clip's comparison. What the gate stops early on.
std::string certain_quality_failure(const std::string& name, const std::vector<cv::Mat>& cand8,
                                    const std::vector<cv::Mat>& base8, bool lossless, const GateSettings& settings,
                                    nlohmann::json& seen);

struct QualityResult {
  GateCheck check;
  nlohmann::json clips = nlohmann::json::object();  // per clip: its metrics (quality.json)
  double worst_psnr = 0, worst_ssim = 0;            // the split's worst clip means
};

// controls: the precision control's clips of comparisons.need_precision_control, in order (the gate run
// stops at the first that failed).
QualityResult check_quality(const GateEvidence& evidence, const QualityComparisons& comparisons, bool lossless,
                            const GateSettings& settings, const std::vector<PrecisionControlClip>& controls);

}  // namespace autooptim::gates
