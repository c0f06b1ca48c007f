#include "gates/detectors.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace autooptim::gates {
namespace {

std::string fmt(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string list_ints(const std::vector<int>& v, size_t limit = 8) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < limit; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > limit) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

// JSON has no NaN/Inf; nlohmann writes them as null, which is what we want, but say so explicitly.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

void check_clip(const std::vector<cv::Mat>& frames, const char* what) {
  for (size_t t = 0; t < frames.size(); ++t) {
    if (frames[t].empty()) throw Error(std::string(what) + ": frame " + std::to_string(t) + " is empty");
    if (frames[t].size() != frames[0].size() || frames[t].channels() != frames[0].channels())
      throw Error(std::string(what) + ": frame " + std::to_string(t) + " differs in shape from frame 0");
  }
}

cv::Mat luma_u8(const cv::Mat& frame) {
  cv::Mat y8;
  luma255(frame).convertTo(y8, CV_8U);
  return y8;
}

// Sums |gradient| across the grid lines (every n pixels) and elsewhere, along rows and columns.
struct GridSums {
  double boundary = 0, interior = 0;
  int64_t n_boundary = 0, n_interior = 0;
  double ratio() const {
    constexpr double kEps = 0.05;  // levels; keeps flat frames at ratio 1
    if (n_boundary == 0 || n_interior == 0) return 1.0;
    return (boundary / n_boundary + kEps) / (interior / n_interior + kEps);
  }
};

void accumulate_grid(const cv::Mat& y, int n, GridSums& s) {
  for (int i = 0; i < y.rows; ++i) {
    const float* r = y.ptr<float>(i);
    const float* below = i + 1 < y.rows ? y.ptr<float>(i + 1) : nullptr;
    for (int j = 0; j < y.cols; ++j) {
      if (j + 1 < y.cols) {
        const double g = std::abs(r[j + 1] - r[j]);
        if ((j + 1) % n == 0) {
          s.boundary += g;
          ++s.n_boundary;
        } else {
          s.interior += g;
          ++s.n_interior;
        }
      }
      if (below) {
        const double g = std::abs(below[j] - r[j]);
        if ((i + 1) % n == 0) {
          s.boundary += g;
          ++s.n_boundary;
        } else {
          s.interior += g;
          ++s.n_interior;
        }
      }
    }
  }
}

// Staircase steps along the rows of an 8-bit image (see detect_banding).
void count_steps(const cv::Mat& y8, int64_t& steps, int64_t& flat_pairs) {
  constexpr int kRun = 6, kMinStep = 2, kMaxStep = 24;
  const int w = y8.cols;
  if (w < 2) return;
  std::vector<int> d(static_cast<size_t>(w - 1));
  std::vector<int> rough(static_cast<size_t>(w));  // prefix count of d != 0
  for (int i = 0; i < y8.rows; ++i) {
    const uint8_t* r = y8.ptr<uint8_t>(i);
    rough[0] = 0;
    for (int j = 0; j + 1 < w; ++j) {
      d[j] = static_cast<int>(r[j + 1]) - static_cast<int>(r[j]);
      const bool flat = d[j] == 0;
      flat_pairs += flat;
      rough[j + 1] = rough[j] + (flat ? 0 : 1);
    }
    for (int j = kRun; j + kRun < w - 1; ++j) {
      const int a = std::abs(d[j]);
      if (a < kMinStep || a > kMaxStep) continue;
      const bool flat_before = rough[j] - rough[j - kRun] == 0;
      const bool flat_after = rough[j + 1 + kRun] - rough[j + 1] == 0;
      steps += flat_before && flat_after;
    }
  }
}

}  // namespace

BlackFrames detect_black(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "detect_black");
  BlackFrames b;
  for (size_t t = 0; t < frames.size(); ++t) {
    const double m = cv::mean(luma255(frames[t]))[0];
    b.mean_luma.push_back(m);
    if (m < th.black_mean_luma) b.frames.push_back(static_cast<int>(t));
  }
  b.present = !b.frames.empty();
  return b;
}

FrozenFrames detect_frozen(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "detect_frozen");
  FrozenFrames f;
  int run = 0;
  for (size_t t = 1; t < frames.size(); ++t) {
    cv::Mat d;
    cv::absdiff(to_float255(frames[t]), to_float255(frames[t - 1]), d);
    const cv::Scalar per_channel = cv::mean(d);
    double m = 0;
    for (int c = 0; c < d.channels(); ++c) m += per_channel[c];
    m /= d.channels();
    f.diffs.push_back(m);
    if (m < th.frozen_mean_abs_diff) {
      f.transitions.push_back(static_cast<int>(t - 1));
      f.longest_run = std::max(f.longest_run, ++run);
    } else {
      run = 0;
    }
  }
  f.present = !f.transitions.empty();
  return f;
}

NanSaturation detect_nan_saturation(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "detect_nan_saturation");
  NanSaturation n;
  if (frames.empty()) return n;
  const int channels = frames[0].channels();
  int64_t low[3] = {0, 0, 0}, high[3] = {0, 0, 0};
  for (size_t t = 0; t < frames.size(); ++t) {
    if (frames[t].depth() == CV_32F) {
      int64_t bad = 0;
      for (int i = 0; i < frames[t].rows; ++i) {
        const float* r = frames[t].ptr<float>(i);
        for (int j = 0; j < frames[t].cols * channels; ++j) bad += !std::isfinite(r[j]);
      }
      n.nonfinite += bad;
      if (bad) n.nonfinite_frames.push_back(static_cast<int>(t));
    }
    std::vector<cv::Mat> planes;
    cv::split(to_float255(frames[t]), planes);
    for (int c = 0; c < channels && c < 3; ++c) {
      cv::Mat lo, hi;
      cv::compare(planes[c], 0.5, lo, cv::CMP_LT);
      cv::compare(planes[c], 254.5, hi, cv::CMP_GE);
      low[c] += cv::countNonZero(lo);
      high[c] += cv::countNonZero(hi);
    }
  }
  const double total = static_cast<double>(frames.size()) * static_cast<double>(frames[0].total());
  for (int c = 0; c < channels && c < 3; ++c) {
    n.low_fraction[c] = low[c] / total;
    n.high_fraction[c] = high[c] / total;
    n.saturated = std::max(n.saturated, n.low_fraction[c] + n.high_fraction[c]);
  }
  n.nonfinite_present = n.nonfinite > 0;
  n.saturated_present = n.saturated > th.saturated_fraction;
  return n;
}

Blockiness detect_blockiness(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "detect_blockiness");
  GridSums g16, g32;
  for (const auto& f : frames) {
    const cv::Mat y = luma255(f);
    accumulate_grid(y, 16, g16);
    accumulate_grid(y, 32, g32);
  }
  Blockiness b;
  b.ratio16 = g16.ratio();
  b.ratio32 = g32.ratio();
  b.score = std::max(b.ratio16, b.ratio32);
  b.present = b.score > th.blockiness_ratio;
  return b;
}

Banding detect_banding(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "detect_banding");
  Banding b;
  for (const auto& f : frames) {
    const cv::Mat y8 = luma_u8(f);
    count_steps(y8, b.steps[0], b.flat_pairs[0]);
    count_steps(y8.t(), b.steps[1], b.flat_pairs[1]);
  }
  for (int k = 0; k < 2; ++k)
    if (b.flat_pairs[k] > 0) b.score = std::max(b.score, static_cast<double>(b.steps[k]) / b.flat_pairs[k]);
  b.present = b.score > th.banding_score;
  return b;
}

namespace {

void clip_channel_mean(const std::vector<cv::Mat>& frames, double out[3]) {
  out[0] = out[1] = out[2] = 0;
  if (frames.empty()) return;
  for (const auto& f : frames) {
    const cv::Scalar m = cv::mean(to_float255(f));
    for (int c = 0; c < 3; ++c) out[c] += f.channels() == 1 ? m[0] : m[c];
  }
  for (int c = 0; c < 3; ++c) out[c] /= static_cast<double>(frames.size());
}

ColourShift shift_from_means(const double cand[3], const double base[3], const DetectorThresholds& th) {
  ColourShift s;
  for (int c = 0; c < 3; ++c) {
    s.shift[c] = cand[c] - base[c];
    s.max_abs = std::max(s.max_abs, std::abs(s.shift[c]));
  }
  s.present = s.max_abs > th.colour_shift;
  return s;
}

}  // namespace

ColourShift detect_colour_shift(const std::vector<cv::Mat>& candidate, const std::vector<cv::Mat>& baseline,
                                const DetectorThresholds& th) {
  check_clip(candidate, "detect_colour_shift");
  check_clip(baseline, "detect_colour_shift");
  double a[3], b[3];
  clip_channel_mean(candidate, a);
  clip_channel_mean(baseline, b);
  return shift_from_means(a, b, th);
}

FlickerSpikes detect_flicker_spikes(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "detect_flicker_spikes");
  FlickerSpikes s;
  s.flicker = temporal_flicker(frames);
  s.present = !s.flicker.diffs.empty() && s.flicker.spike >= th.flicker_spike &&
              s.flicker.max - s.flicker.median >= th.flicker_min_excess;
  return s;
}

VisualReport visual_report(const std::vector<cv::Mat>& frames, const DetectorThresholds& th) {
  check_clip(frames, "visual_report");
  VisualReport r;
  r.thresholds = th;
  r.frames = static_cast<int>(frames.size());
  if (!frames.empty()) {
    r.width = frames[0].cols;
    r.height = frames[0].rows;
  }
  r.black = detect_black(frames, th);
  r.frozen = detect_frozen(frames, th);
  r.nan_saturation = detect_nan_saturation(frames, th);
  r.blockiness = detect_blockiness(frames, th);
  r.banding = detect_banding(frames, th);
  clip_channel_mean(frames, r.channel_mean);
  r.flicker = detect_flicker_spikes(frames, th);
  return r;
}

std::string black_beyond(const BlackFrames& cand, const BlackFrames& base, const DetectorThresholds& th,
                         const ArtifactMargins& m) {
  if (!cand.present) return "";
  std::vector<int> fresh;
  if (cand.mean_luma.size() == base.mean_luma.size()) {
    for (int t : cand.frames)
      if (base.mean_luma[t] >= th.black_mean_luma + m.black_luma) fresh.push_back(t);
  } else if (cand.frames.size() > base.frames.size()) {
    fresh = cand.frames;
  }
  if (fresh.empty()) return "";
  return "black frames: " + std::to_string(fresh.size()) + " (frames " + list_ints(fresh) + ") have mean luma below " +
         fmt(th.black_mean_luma, 1) + " where the baseline's do not";
}

std::string frozen_beyond(const FrozenFrames& cand, const FrozenFrames& base, const DetectorThresholds& th,
                          const ArtifactMargins& m) {
  if (!cand.present) return "";
  std::vector<int> fresh;
  if (cand.diffs.size() == base.diffs.size()) {
    for (int t : cand.transitions)
      if (base.diffs[t] >= m.frozen_factor * th.frozen_mean_abs_diff) fresh.push_back(t);
  } else if (cand.transitions.size() > base.transitions.size()) {
    fresh = cand.transitions;
  }
  if (fresh.empty()) return "";
  return "frozen frames: " + std::to_string(fresh.size()) + " transitions (after frames " + list_ints(fresh) +
         ") repeat the previous frame (mean |diff| < " + fmt(th.frozen_mean_abs_diff) + ") where the baseline moves";
}

std::string nonfinite_beyond(const NanSaturation& cand, const NanSaturation& base) {
  if (!cand.nonfinite_present || cand.nonfinite <= base.nonfinite) return "";
  return "NaN/Inf values: " + std::to_string(cand.nonfinite) + " in frames " + list_ints(cand.nonfinite_frames) +
         " (baseline: " + std::to_string(base.nonfinite) + ")";
}

std::string saturation_beyond(const NanSaturation& cand, const NanSaturation& base, const ArtifactMargins& m) {
  if (!cand.saturated_present || cand.saturated <= base.saturated + m.saturated_fraction) return "";
  return "saturation: " + fmt(100 * cand.saturated, 1) + "% of pixels clipped at 0 or 255 in one channel (baseline " +
         fmt(100 * base.saturated, 1) + "%)";
}

std::string blockiness_beyond(const Blockiness& cand, const Blockiness& base, const ArtifactMargins& m) {
  if (!cand.present || cand.score <= base.score + m.blockiness) return "";
  return "blockiness: grid-boundary gradient ratio " + fmt(cand.score) + " (16px " + fmt(cand.ratio16) + ", 32px " +
         fmt(cand.ratio32) + "; baseline " + fmt(base.score) + ")";
}

std::string banding_beyond(const Banding& cand, const Banding& base, const ArtifactMargins& m) {
  if (!cand.present || cand.score <= 1.5 * base.score + m.banding) return "";
  return "banding: " + fmt(cand.score, 4) + " staircase steps per flat pixel pair (baseline " + fmt(base.score, 4) +
         ")";
}

std::string flicker_beyond(const FlickerSpikes& cand, const FlickerSpikes& base, const ArtifactMargins& m) {
  if (!cand.present) return "";
  const double bar = std::max(1.25 * base.flicker.spike, base.flicker.spike + m.flicker_spike);
  if (cand.flicker.spike <= bar) return "";
  return "flicker spike: worst transition " + fmt(cand.flicker.max) + " levels is " + fmt(cand.flicker.spike, 1) +
         "x the median (baseline " + fmt(base.flicker.spike, 1) + "x)";
}

std::string colour_shift_reason(const ColourShift& s) {
  if (!s.present) return "";
  return "colour shift: per-channel mean differs from the baseline by R " + fmt(s.shift[0]) + ", G " + fmt(s.shift[1]) +
         ", B " + fmt(s.shift[2]) + " levels";
}

std::vector<std::string> new_artifacts(const VisualReport& candidate, const VisualReport& baseline,
                                       const ArtifactMargins& m) {
  const DetectorThresholds& th = candidate.thresholds;
  std::vector<std::string> reasons;
  auto add = [&](std::string r) {
    if (!r.empty()) reasons.push_back(std::move(r));
  };
  if (candidate.frames != baseline.frames || candidate.width != baseline.width || candidate.height != baseline.height)
    add("clip shape: " + std::to_string(candidate.frames) + " frames of " + std::to_string(candidate.width) + "x" +
        std::to_string(candidate.height) + " vs the baseline's " + std::to_string(baseline.frames) + " of " +
        std::to_string(baseline.width) + "x" + std::to_string(baseline.height));
  add(nonfinite_beyond(candidate.nan_saturation, baseline.nan_saturation));
  add(black_beyond(candidate.black, baseline.black, th, m));
  add(frozen_beyond(candidate.frozen, baseline.frozen, th, m));
  add(saturation_beyond(candidate.nan_saturation, baseline.nan_saturation, m));
  add(blockiness_beyond(candidate.blockiness, baseline.blockiness, m));
  add(banding_beyond(candidate.banding, baseline.banding, m));
  add(colour_shift_reason(shift_from_means(candidate.channel_mean, baseline.channel_mean, th)));
  add(flicker_beyond(candidate.flicker, baseline.flicker, m));
  return reasons;
}

ObjectTrack detect_object_track(const std::vector<cv::Mat>& frames, const ObjectTrackThresholds& th) {
  check_clip(frames, "detect_object_track");
  ObjectTrack t;
  t.hue_histogram.assign(180, 0);
  double frac = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    cv::Mat rgb8 = frames[i];
    if (rgb8.depth() != CV_8U) frames[i].convertTo(rgb8, CV_8UC3, 255.0);  // rounds and clamps as the 8-bit clip
    cv::Mat hsv, mask;
    cv::cvtColor(rgb8, hsv, cv::COLOR_RGB2HSV);
    cv::inRange(hsv, cv::Scalar(0, th.min_saturation, th.min_value), cv::Scalar(180, 255, 255), mask);
    const cv::Moments mo = cv::moments(mask, true);
    if (mo.m00 < th.min_pixels) continue;
    t.frames.push_back(static_cast<int>(i));
    t.centroids.emplace_back(mo.m10 / mo.m00, mo.m01 / mo.m00);
    frac += mo.m00 / static_cast<double>(mask.total());
    for (int y = 0; y < hsv.rows; ++y) {
      const auto* px = hsv.ptr<cv::Vec3b>(y);
      const auto* in = mask.ptr<uint8_t>(y);
      for (int x = 0; x < hsv.cols; ++x)
        if (in[x]) ++t.hue_histogram[std::min<size_t>(px[x][0], 179)];
    }
  }
  t.object_fraction = frames.empty() ? 0 : frac / static_cast<double>(frames.size());
  if (t.centroids.empty()) return t;
  double c = 0, s = 0;  // the hue circle is 180 units round
  for (int h = 0; h < 180; ++h) {
    const double a = h * CV_PI / 90.0;
    c += static_cast<double>(t.hue_histogram[static_cast<size_t>(h)]) * std::cos(a);
    s += static_cast<double>(t.hue_histogram[static_cast<size_t>(h)]) * std::sin(a);
  }
  t.hue = std::fmod(std::atan2(s, c) * 90.0 / CV_PI + 180.0, 180.0);
  t.present = t.centroids.size() >= 2;
  if (!t.present) return t;
  const size_t q = std::max<size_t>(1, t.centroids.size() / 4);
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  for (size_t i = 0; i < q; ++i) {
    x0 += t.centroids[i].x, y0 += t.centroids[i].y;
    x1 += t.centroids[t.centroids.size() - 1 - i].x, y1 += t.centroids[t.centroids.size() - 1 - i].y;
  }
  t.dx = (x1 - x0) / static_cast<double>(q);
  t.dy = (y1 - y0) / static_cast<double>(q);
  return t;
}

bool single_object(const ObjectTrack& base, const SemanticMargins& m) {
  return base.present && base.object_fraction <= m.max_object_fraction;
}

std::vector<std::string> lost_semantics(const ObjectTrack& cand, const ObjectTrack& base, const SemanticMargins& m) {
  std::vector<std::string> reasons;
  if (!single_object(base, m)) return reasons;
  if (!cand.present) {
    reasons.push_back("object lost: the baseline shows it in " + std::to_string(base.frames.size()) + " frames (hue " +
                      fmt(base.hue, 0) + "), the candidate in " + std::to_string(cand.frames.size()));
    return reasons;
  }
  double dh = std::fabs(cand.hue - base.hue);
  dh = std::min(dh, 180.0 - dh);
  if (dh > m.hue)
    reasons.push_back("object colour changed: hue " + fmt(base.hue, 0) + " -> " + fmt(cand.hue, 0) +
                      " (OpenCV units, " + fmt(dh, 0) + " apart, bound " + fmt(m.hue, 0) + ")");
  const double travel = std::hypot(base.dx, base.dy);
  if (travel >= m.min_travel) {
    const double along = (cand.dx * base.dx + cand.dy * base.dy) / travel;  // the candidate's travel along it
    if (along < m.kept_travel * travel)
      reasons.push_back("object motion lost: the baseline's moves (" + fmt(base.dx, 1) + ", " + fmt(base.dy, 1) +
                        ") px, the candidate's (" + fmt(cand.dx, 1) + ", " + fmt(cand.dy, 1) + "): " + fmt(along, 1) +
                        " px along that direction, under " + fmt(m.kept_travel, 2) + " of " + fmt(travel, 1));
  }
  return reasons;
}

nlohmann::json to_json(const ObjectTrack& t) {
  return {{"present", t.present}, {"frames", t.frames.size()}, {"hue", num(t.hue)},
          {"dx", num(t.dx)},      {"dy", num(t.dy)},           {"object_fraction", num(t.object_fraction)}};
}

nlohmann::json to_json(const ColourShift& c) {
  return {{"shift", {num(c.shift[0]), num(c.shift[1]), num(c.shift[2])}},
          {"max_abs", num(c.max_abs)},
          {"present", c.present}};
}

nlohmann::json to_json(const VisualReport& r) {
  using nlohmann::json;
  auto arr3 = [](const double v[3]) { return json::array({num(v[0]), num(v[1]), num(v[2])}); };
  auto nums = [](const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(num(x));
    return a;
  };
  const auto& t = r.thresholds;
  const auto& ns = r.nan_saturation;
  return {
      {"frames", r.frames},
      {"width", r.width},
      {"height", r.height},
      {"black", {{"present", r.black.present}, {"frames", r.black.frames}, {"mean_luma", nums(r.black.mean_luma)}}},
      {"frozen",
       {{"present", r.frozen.present},
        {"transitions", r.frozen.transitions},
        {"longest_run", r.frozen.longest_run},
        {"diffs", nums(r.frozen.diffs)}}},
      {"nonfinite", {{"present", ns.nonfinite_present}, {"count", ns.nonfinite}, {"frames", ns.nonfinite_frames}}},
      {"saturation",
       {{"present", ns.saturated_present},
        {"fraction", num(ns.saturated)},
        {"low_fraction", arr3(ns.low_fraction)},
        {"high_fraction", arr3(ns.high_fraction)}}},
      {"blockiness",
       {{"present", r.blockiness.present},
        {"score", num(r.blockiness.score)},
        {"ratio16", num(r.blockiness.ratio16)},
        {"ratio32", num(r.blockiness.ratio32)}}},
      {"banding",
       {{"present", r.banding.present},
        {"score", num(r.banding.score)},
        {"steps", {r.banding.steps[0], r.banding.steps[1]}},
        {"flat_pairs", {r.banding.flat_pairs[0], r.banding.flat_pairs[1]}}}},
      {"channel_mean", arr3(r.channel_mean)},
      {"flicker",
       {{"present", r.flicker.present},
        {"spike", num(r.flicker.flicker.spike)},
        {"max", num(r.flicker.flicker.max)},
        {"median", num(r.flicker.flicker.median)},
        {"mean", num(r.flicker.flicker.mean)},
        {"diffs", nums(r.flicker.flicker.diffs)}}},
      {"thresholds",
       {{"black_mean_luma", t.black_mean_luma},
        {"frozen_mean_abs_diff", t.frozen_mean_abs_diff},
        {"saturated_fraction", t.saturated_fraction},
        {"blockiness_ratio", t.blockiness_ratio},
        {"banding_score", t.banding_score},
        {"flicker_spike", t.flicker_spike},
        {"flicker_min_excess", t.flicker_min_excess},
        {"colour_shift", t.colour_shift}}},
  };
}

}  // namespace autooptim::gates
