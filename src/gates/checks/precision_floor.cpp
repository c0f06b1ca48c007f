#include "gates/checks/precision_floor.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "gates/metrics.h"

namespace autooptim::gates {

using base::format_fixed;
using nlohmann::json;

namespace {

// The margins of every judged clip, summed for the means.
struct FloorMargins {
  double worst = kPsnrCap, sum = 0, sum_ssim = 0;
  int64_t judged = 0;
};

// One clip against the control: its margins over the baseline's; a failure when beyond the clip slacks.
void judge_clip(const GateClip& c, const std::vector<cv::Mat>& ctl8, const std::string& up, const GateSettings& S,
                PrecisionFloor& floor, FloorMargins& m) {
  const auto bq = compare_clips(c.base8, ctl8), cq = compare_clips(c.cand8, ctl8);
  double margin = cq.psnr_mean - bq.psnr_mean, ssim_margin = cq.ssim_mean - bq.ssim_mean;
  if (std::isnan(margin) || std::isnan(ssim_margin)) margin = -kPsnrCap, ssim_margin = -1;
  const bool ok = margin >= -S.floor_clip_psnr_slack && ssim_margin >= -S.floor_clip_ssim_slack;
  floor.details["clips"][c.name] = {{"baseline_vs_control", gates::to_json(bq)},
                                    {"candidate_vs_control", gates::to_json(cq)},
                                    {"psnr_margin_db", margin},
                                    {"ssim_margin", ssim_margin},
                                    {"within_clip_slack", ok}};
  m.worst = std::min(m.worst, margin);
  m.sum += margin;
  m.sum_ssim += ssim_margin;
  ++m.judged;
  if (!ok && floor.failure.empty())
    floor.failure = c.name + ": " + format_fixed(cq.psnr_mean, 2) + " dB / SSIM " + format_fixed(cq.ssim_mean, 4) +
                    " from the " + up + " control, the baseline " + format_fixed(bq.psnr_mean, 2) + " dB / SSIM " +
                    format_fixed(bq.ssim_mean, 4) + " (a clip may fall " + format_fixed(S.floor_clip_psnr_slack, 2) +
                    " dB, " + format_fixed(S.floor_clip_ssim_slack, 4) + " behind)";
}

}  // namespace

PrecisionFloor judge_precision_floor(const GateEvidence& ev, const std::vector<size_t>& short_clips,
                                     const std::vector<PrecisionControlClip>& controls, const GateSettings& S) {
  const std::string& up = ev.control_dtype;
  PrecisionFloor floor;
  floor.details = {{"control_dtype", up.empty() ? json(nullptr) : json(up)},
                   {"psnr_slack_db", S.floor_psnr_slack},
                   {"ssim_slack", S.floor_ssim_slack},
                   {"clips", json::object()}};
  if (up.empty()) floor.failure = "the baseline computes in float64: there is no precision above it to compare with";
  FloorMargins m;
  for (size_t i = 0; i < short_clips.size() && i < controls.size(); ++i) {
    if (up.empty()) break;
    const GateClip& c = ev.clips[short_clips[i]];
    const PrecisionControlClip& ctl = controls[i];
    if (!ctl.error.empty()) {
      floor.failure = "the precision control (" + up + ") of " + c.name + " failed: " + ctl.error;
      break;
    }
    judge_clip(c, ctl.frames, up, S, floor, m);
  }
  const double mean_margin = m.judged ? m.sum / m.judged : -kPsnrCap;
  const double mean_ssim_margin = m.judged ? m.sum_ssim / m.judged : -1;
  if (floor.failure.empty() && (mean_margin < -S.floor_psnr_slack || mean_ssim_margin < -S.floor_ssim_slack))
    floor.failure = "on average over " + std::to_string(m.judged) + " clip(s) " + format_fixed(-mean_margin, 2) +
                    " dB and SSIM " + format_fixed(-mean_ssim_margin, 4) + " further from the " + up +
                    " control than the baseline (slack " + format_fixed(S.floor_psnr_slack, 2) + " dB, " +
                    format_fixed(S.floor_ssim_slack, 4) + ")";
  floor.details["mean_psnr_margin_db"] = mean_margin;
  floor.details["mean_ssim_margin"] = mean_ssim_margin;
  floor.details["pass"] = floor.failure.empty();
  floor.details["worst_psnr_margin_db"] = m.worst;
  return floor;
}

}  // namespace autooptim::gates
