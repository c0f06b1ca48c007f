#include "gates/checks/quality.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/strings.h"
#include "gates/clip_frames.h"
#include "gates/metrics.h"

namespace autooptim::gates {

using base::format_fixed;
using nlohmann::json;

namespace {

// A clip's mean PSNR and SSIM, a NaN (nothing to compare) read as 0.
std::pair<double, double> means_of(const ClipQuality& q) {
  return {std::isnan(q.psnr_mean) ? 0 : q.psnr_mean, std::isnan(q.ssim_mean) ? 0 : q.ssim_mean};
}

}  // namespace

double needed_psnr(bool lossless, const GateSettings& S) { return lossless ? S.lossless_psnr : S.min_psnr; }
double needed_ssim(bool lossless, const GateSettings& S) { return lossless ? 0.999 : S.min_ssim; }

std::string certain_quality_failure(const std::string& name, const std::vector<cv::Mat>& cand8,
                                    const std::vector<cv::Mat>& base8, bool lossless, const GateSettings& S,
                                    json& seen) {
  if (lossless && S.precision_floor) return "";  // the precision control may still confirm the claim
  if (!same_shape(cand8, base8)) return name + ": the clip's size differs from the baseline's (another config)";
  if (same_frames(cand8, base8)) return "";
  const auto q = compare_clips(cand8, base8);
  const auto [qp, qs] = means_of(q);
  seen = gates::to_json(q);
  seen["clip"] = name;
  const double need_p = needed_psnr(lossless, S), need_s = needed_ssim(lossless, S);
  if (qp >= need_p && qs >= need_s) return "";
  return "quality below tolerance on " + name + ": PSNR " + format_fixed(qp, 2) + " dB (needs " +
         format_fixed(need_p, 2) + "), SSIM " + format_fixed(qs, 4) + " (needs " + format_fixed(need_s, 4) + ")";
}

namespace {

std::string first_audit_failure(const QualityComparisons& cmp, const std::vector<GateClip>& clips, double need) {
  for (const auto& [k, qp] : cmp.audits)
    if (qp < need)
      return "unannounced audit " + clips[k].name + ": PSNR " + format_fixed(qp, 2) +
             " dB against the baseline's clip of that prompt and seed (needs " + format_fixed(need, 2) + ")";
  return "";
}

std::string floor_reason(const std::string& shown, double need_psnr, const json& floor) {
  return shown + ": below the " + format_fixed(need_psnr, 0) +
         " dB of a lossless claim, but its clips are as close to the " + floor["control_dtype"].get<std::string>() +
         " control as the baseline's (mean margin " + format_fixed(floor["mean_psnr_margin_db"].get<double>(), 2) +
         " dB, worst " + format_fixed(floor["worst_psnr_margin_db"].get<double>(), 2) +
         " dB): lossless within the baseline's rounding";
}

}  // namespace

QualityComparisons compare_quality(const GateEvidence& ev, bool lossless, const GateSettings& S) {
  QualityComparisons r;
  r.worst_psnr = r.worst_audit_psnr = kPsnrCap;
  r.worst_ssim = 1.0;
  const double need_psnr = needed_psnr(lossless, S), need_ssim = needed_ssim(lossless, S);
  for (size_t k = 0; k < ev.clips.size(); ++k) {
    const GateClip& c = ev.clips[k];
    if (!same_shape(c.cand8, c.base8)) {
      r.incomparable = c.name + ": the clip's size differs from the baseline's (another config)";
      r.worst_psnr = r.worst_ssim = 0;
      r.clips[c.name] = {{"comparable", false}};
      continue;
    }
    const auto q = compare_clips(c.cand8, c.base8);
    json qj = gates::to_json(q);
    qj["bit_identical"] = c.identical;
    qj["audit"] = c.pair;
    r.clips[c.name] = qj;
    const auto [qp, qs] = means_of(q);
    if (c.pair) {
      r.worst_audit_psnr = std::min(r.worst_audit_psnr, qp);
      r.audits.emplace_back(k, qp);
      continue;
    }
    r.worst_psnr = std::min(r.worst_psnr, qp);
    r.worst_ssim = std::min(r.worst_ssim, qs);
    if (qp < need_psnr || qs < need_ssim) r.short_of_need.push_back(k);
  }
  // A lossless claim the 50 dB rule does not confirm: each short clip against the precision control.
  if (lossless && S.precision_floor && r.incomparable.empty()) r.need_precision_control = r.short_of_need;
  return r;
}

QualityResult check_quality(const GateEvidence& ev, const QualityComparisons& cmp, bool lossless, const GateSettings& S,
                            const std::vector<PrecisionControlClip>& controls) {
  QualityResult result;
  GateCheck& g = result.check;
  g = {"quality", true, "", json::object()};
  const double need_psnr = needed_psnr(lossless, S), need_ssim = needed_ssim(lossless, S);
  double need_audit_psnr = lossless ? S.lossless_psnr : S.min_psnr - S.audit_psnr_slack;
  const bool try_floor = !cmp.need_precision_control.empty();
  PrecisionFloor floor;
  if (try_floor) {
    floor = judge_precision_floor(ev, cmp.need_precision_control, controls, S);
    if (floor.failure.empty()) need_audit_psnr = std::min(S.lossless_psnr, cmp.worst_psnr - S.audit_psnr_slack);
  }
  const bool by_floor = try_floor && floor.failure.empty();
  const std::string audit_why = first_audit_failure(cmp, ev.clips, need_audit_psnr);
  result.clips = cmp.clips;
  result.worst_psnr = cmp.worst_psnr;
  result.worst_ssim = cmp.worst_ssim;
  g.details = {{"worst_psnr", cmp.worst_psnr},
               {"worst_ssim", cmp.worst_ssim},
               {"min_psnr", need_psnr},
               {"min_ssim", need_ssim},
               {"worst_audit_psnr", cmp.worst_audit_psnr},
               {"min_audit_psnr", need_audit_psnr},
               {"lossless", lossless}};
  if (try_floor) g.details["precision_floor"] = floor.details;
  const std::string shown =
      "worst PSNR " + format_fixed(cmp.worst_psnr, 2) + " dB, worst SSIM " + format_fixed(cmp.worst_ssim, 4);
  if (!cmp.incomparable.empty()) {
    g.pass = false;
    g.reason = cmp.incomparable;
  } else if (!cmp.short_of_need.empty() && !by_floor) {
    g.pass = false;
    g.reason = "quality below tolerance: worst PSNR " + format_fixed(cmp.worst_psnr, 2) + " dB (needs " +
               format_fixed(need_psnr, 2) + "), worst SSIM " + format_fixed(cmp.worst_ssim, 4) + " (needs " +
               format_fixed(need_ssim, 4) + ")";
    if (try_floor) g.reason += "; nor within the precision floor: " + floor.failure;
  } else if (!audit_why.empty()) {
    g.pass = false;
    g.reason = audit_why;
  } else {
    g.reason = by_floor ? floor_reason(shown, need_psnr, floor.details) : shown;
  }
  return result;
}

}  // namespace autooptim::gates
