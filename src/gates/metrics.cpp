#include "gates/metrics.h"

#include <opencv2/imgproc.hpp>
#include <opencv2/video/tracking.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace autooptim::gates {
namespace {

std::string describe(const cv::Mat& m) {
  return std::to_string(m.cols) + "x" + std::to_string(m.rows) + "x" + std::to_string(m.channels());
}

void check_same_shape(const cv::Mat& a, const cv::Mat& b, const char* what) {
  if (a.empty() || b.empty()) throw Error(std::string(what) + ": empty frame");
  if (a.size() != b.size() || a.channels() != b.channels())
    throw Error(std::string(what) + ": frames differ in shape, " + describe(a) + " vs " + describe(b));
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// NaN when any value is NaN, so a gate comparing min >= tolerance fails on a broken frame.
double min_of(const std::vector<double>& v) {
  double m = v.empty() ? 0.0 : v[0];
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::min(m, x);
  }
  return m;
}

double max_of(const std::vector<double>& v) {
  double m = v.empty() ? 0.0 : v[0];
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::max(m, x);
  }
  return m;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<long>(mid));
  return 0.5 * (lo + hi);
}

// Mean SSIM per channel (frames CV_32FC(n), 8-bit scale) over the valid region. Float32 is exact
// enough once the data is centred on 0 (variances up to 128^2, error ~1e-3 against C2 = 58.5) and an
// order of magnitude faster than double.
cv::Scalar ssim_channels(const cv::Mat& x, const cv::Mat& y) {
  constexpr double kC1 = (0.01 * 255) * (0.01 * 255);
  constexpr double kC2 = (0.03 * 255) * (0.03 * 255);
  static const cv::Mat kernel = cv::getGaussianKernel(11, 1.5, CV_32F);
  auto blur = [&](const cv::Mat& m) {
    cv::Mat out;
    cv::sepFilter2D(m, out, CV_32F, kernel, kernel, cv::Point(-1, -1), 0, cv::BORDER_REFLECT);
    return out;
  };
  cv::Mat xc, yc;
  x.convertTo(xc, CV_32F, 1.0, -128.0);
  y.convertTo(yc, CV_32F, 1.0, -128.0);
  const cv::Mat mx = blur(xc), my = blur(yc);  // centred means: the variances below are shift-free
  const cv::Mat s_xx = blur(xc.mul(xc)) - mx.mul(mx);
  const cv::Mat s_yy = blur(yc.mul(yc)) - my.mul(my);
  const cv::Mat s_xy = blur(xc.mul(yc)) - mx.mul(my);
  const cv::Mat mu_x = mx + cv::Scalar::all(128), mu_y = my + cv::Scalar::all(128);
  const cv::Mat num = (2 * mu_x.mul(mu_y) + cv::Scalar::all(kC1)).mul(2 * s_xy + cv::Scalar::all(kC2));
  const cv::Mat den = (mu_x.mul(mu_x) + mu_y.mul(mu_y) + cv::Scalar::all(kC1)).mul(s_xx + s_yy + cv::Scalar::all(kC2));
  cv::Mat map;
  cv::divide(num, den, map);
  const cv::Rect valid(5, 5, x.cols - 10, x.rows - 10);
  return cv::mean(map(valid));
}

cv::Mat to_u8_luma(const cv::Mat& frame) {
  cv::Mat y8;
  luma255(frame).convertTo(y8, CV_8U);  // rounds and saturates
  return y8;
}

}  // namespace

cv::Mat to_float255(const cv::Mat& frame) {
  if (frame.empty()) throw Error("frame is empty");
  if (frame.channels() != 1 && frame.channels() != 3)
    throw Error("frame has " + std::to_string(frame.channels()) + " channels; expected 1 or 3 (RGB)");
  cv::Mat out;
  if (frame.depth() == CV_8U)
    frame.convertTo(out, CV_32F);
  else if (frame.depth() == CV_32F)
    frame.convertTo(out, CV_32F, 255.0);
  else
    throw Error("frame depth " + std::to_string(frame.depth()) + " unsupported; expected CV_8U or CV_32F in [0,1]");
  return out;
}

cv::Mat luma255(const cv::Mat& frame) {
  const cv::Mat f = to_float255(frame);
  if (f.channels() == 1) return f;
  cv::Mat y;
  const cv::Matx13f weights(0.299f, 0.587f, 0.114f);  // RGB order
  cv::transform(f, y, weights);
  return y;
}

double psnr(const cv::Mat& a, const cv::Mat& b) {
  check_same_shape(a, b, "psnr");
  const cv::Mat fa = to_float255(a), fb = to_float255(b);
  const double sse = cv::norm(fa, fb, cv::NORM_L2SQR);  // accumulated in double
  if (std::isnan(sse)) return std::numeric_limits<double>::quiet_NaN();
  const double mse = sse / static_cast<double>(fa.total() * static_cast<size_t>(fa.channels()));
  if (mse <= 0) return kPsnrCap;
  return std::min(kPsnrCap, 10.0 * std::log10(255.0 * 255.0 / mse));
}

double ssim(const cv::Mat& a, const cv::Mat& b) {
  check_same_shape(a, b, "ssim");
  if (a.cols < 11 || a.rows < 11) throw Error("ssim: frames must be at least 11x11, got " + describe(a));
  const cv::Scalar per_channel = ssim_channels(to_float255(a), to_float255(b));
  double sum = 0;
  for (int c = 0; c < a.channels(); ++c) sum += per_channel[c];
  return sum / a.channels();
}

ClipQuality compare_clips(const std::vector<cv::Mat>& ours, const std::vector<cv::Mat>& ref) {
  if (ours.empty() || ref.empty()) throw Error("compare_clips: empty clip");
  if (ours.size() != ref.size())
    throw Error("compare_clips: frame count differs, " + std::to_string(ours.size()) + " vs " +
                std::to_string(ref.size()) + " (reference)");
  ClipQuality q;
  for (size_t t = 0; t < ours.size(); ++t)
    if (ours[t].empty() || ours[t].size() != ref[t].size() || ours[t].channels() != ref[t].channels())
      throw Error("compare_clips: frame " + std::to_string(t) + " differs in size, " + describe(ours[t]) + " vs " +
                  describe(ref[t]) + " (reference)");
  for (const auto* clip : {&ours, &ref}) {
    const cv::Mat& f = (*clip)[0];
    if ((f.depth() != CV_8U && f.depth() != CV_32F) || (f.channels() != 1 && f.channels() != 3))
      throw Error("compare_clips: frames must be CV_8UC3 or CV_32FC3 (or one channel)");
    if (f.cols < 11 || f.rows < 11) throw Error("compare_clips: frames must be at least 11x11, got " + describe(f));
  }
  q.psnr.resize(ours.size());
  q.ssim.resize(ours.size());
  // Frames in parallel (a 121-frame 720p clip is ~0.3 s of SSIM per frame on one core); each frame's
  // value is computed by the same code whatever the thread, so the result is deterministic.
  cv::parallel_for_(cv::Range(0, static_cast<int>(ours.size())), [&](const cv::Range& r) {
    for (int t = r.start; t < r.end; ++t) {
      q.psnr[t] = psnr(ours[t], ref[t]);
      q.ssim[t] = ssim(ours[t], ref[t]);
    }
  });
  q.psnr_mean = mean_of(q.psnr);
  q.psnr_min = min_of(q.psnr);
  q.ssim_mean = mean_of(q.ssim);
  q.ssim_min = min_of(q.ssim);
  return q;
}

Flicker temporal_flicker(const std::vector<cv::Mat>& frames) {
  Flicker f;
  cv::Mat prev;
  for (size_t t = 0; t < frames.size(); ++t) {
    cv::Mat y = luma255(frames[t]);
    if (!prev.empty()) {
      if (y.size() != prev.size()) throw Error("temporal_flicker: frame " + std::to_string(t) + " changes size");
      cv::Mat d;
      cv::absdiff(y, prev, d);
      f.diffs.push_back(cv::mean(d)[0]);
    }
    prev = y;
  }
  if (f.diffs.empty()) return f;
  f.mean = mean_of(f.diffs);
  f.median = median_of(f.diffs);
  f.max = max_of(f.diffs);
  f.spike = f.max / std::max(f.median, kFlickerMedianFloor);
  return f;
}

WarpError warping_error(const std::vector<cv::Mat>& frames, bool mask_occlusions) {
  WarpError w;
  if (frames.size() < 2) return w;
  cv::Ptr<cv::DISOpticalFlow> dis = cv::DISOpticalFlow::create(cv::DISOpticalFlow::PRESET_FAST);
  cv::Mat prev_y = to_u8_luma(frames[0]);
  cv::Mat prev_rgb = to_float255(frames[0]);
  for (size_t t = 1; t < frames.size(); ++t) {
    const cv::Mat next_y = to_u8_luma(frames[t]);
    const cv::Mat next_rgb = to_float255(frames[t]);
    if (next_rgb.size() != prev_rgb.size() || next_rgb.channels() != prev_rgb.channels())
      throw Error("warping_error: frame " + std::to_string(t) + " changes shape");
    cv::Mat flow;  // CV_32FC2: next(x) ~ prev(x + flow(x))
    dis->calc(next_y, prev_y, flow);
    const int h = flow.rows, wd = flow.cols;
    cv::Mat map(h, wd, CV_32FC2);
    for (int i = 0; i < h; ++i) {
      const auto* f = flow.ptr<cv::Vec2f>(i);
      auto* m = map.ptr<cv::Vec2f>(i);
      for (int j = 0; j < wd; ++j) m[j] = cv::Vec2f(static_cast<float>(j) + f[j][0], static_cast<float>(i) + f[j][1]);
    }
    cv::Mat warped;
    cv::remap(prev_rgb, warped, map, cv::noArray(), cv::INTER_LINEAR, cv::BORDER_REPLICATE);
    cv::Mat err;
    cv::absdiff(warped, next_rgb, err);
    if (err.channels() > 1) {
      cv::Mat r = err.reshape(1, static_cast<int>(err.total()));
      cv::reduce(r, err, 1, cv::REDUCE_AVG);
      err = err.reshape(1, h);
    }
    cv::Mat mask(h, wd, CV_8U, cv::Scalar(1));
    if (mask_occlusions) {
      cv::Mat back, back_at;  // prev(y) ~ next(y + back(y)), sampled at y = x + flow(x)
      dis->calc(prev_y, next_y, back);
      cv::remap(back, back_at, map, cv::noArray(), cv::INTER_LINEAR, cv::BORDER_REPLICATE);
      for (int i = 0; i < h; ++i) {
        const auto* f = flow.ptr<cv::Vec2f>(i);
        const auto* b = back_at.ptr<cv::Vec2f>(i);
        const auto* m = map.ptr<cv::Vec2f>(i);
        auto* k = mask.ptr<uint8_t>(i);
        for (int j = 0; j < wd; ++j) {
          const bool inside = m[j][0] >= 0 && m[j][0] <= wd - 1 && m[j][1] >= 0 && m[j][1] <= h - 1;
          const cv::Vec2f s = f[j] + b[j];
          const float lhs = s.dot(s);
          const float rhs = 0.01f * (f[j].dot(f[j]) + b[j].dot(b[j])) + 0.5f;
          k[j] = inside && lhs <= rhs ? 1 : 0;
        }
      }
    }
    double valid = static_cast<double>(cv::countNonZero(mask)) / static_cast<double>(mask.total());
    if (valid < 0.1) {
      mask.setTo(1);
      valid = 1.0;
    }
    w.errors.push_back(cv::mean(err, mask)[0]);
    w.valid_fraction.push_back(valid);
    prev_y = next_y;
    prev_rgb = next_rgb;
  }
  w.mean = mean_of(w.errors);
  w.max = max_of(w.errors);
  return w;
}

nlohmann::json to_json(const ClipQuality& q) {
  return {{"psnr", q.psnr},           {"ssim", q.ssim},         {"psnr_mean", q.psnr_mean}, {"psnr_min", q.psnr_min},
          {"ssim_mean", q.ssim_mean}, {"ssim_min", q.ssim_min}, {"psnr_cap_db", kPsnrCap}};
}

nlohmann::json to_json(const Flicker& f) {
  return {{"diffs", f.diffs}, {"mean", f.mean}, {"median", f.median}, {"max", f.max}, {"spike", f.spike}};
}

nlohmann::json to_json(const WarpError& w) {
  return {{"errors", w.errors}, {"valid_fraction", w.valid_fraction}, {"mean", w.mean}, {"max", w.max}};
}

}  // namespace autooptim::gates
