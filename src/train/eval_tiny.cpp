#include "train/eval_tiny.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>

#include "runtime/error.h"

namespace autooptim::train {
namespace {

constexpr int kMinSaturation = 80;  // of 255: the backgrounds stay well below, the palette well above
constexpr int kMinValue = 60;
constexpr int kMinPixels = 8;       // per frame, to count as an object
constexpr double kMinTravel = 4.0;  // pixels: less is "did not move"

// OpenCV's hue (0..179) of each palette colour.
const std::vector<int>& palette_hues() {
  static const std::vector<int> h = [] {
    std::vector<int> v;
    for (size_t i = 0; i < color_names().size(); ++i) {
      const auto rgb = color_rgb(static_cast<int>(i));
      cv::Mat px(1, 1, CV_8UC3, cv::Scalar(rgb[0] * 255, rgb[1] * 255, rgb[2] * 255)), hsv;
      cv::cvtColor(px, hsv, cv::COLOR_RGB2HSV);
      v.push_back(hsv.at<cv::Vec3b>(0, 0)[0]);
    }
    return v;
  }();
  return h;
}

int nearest_color(int hue) {
  const auto& ph = palette_hues();
  int best = 0, best_d = 1000;
  for (size_t i = 0; i < ph.size(); ++i) {
    int d = std::abs(hue - ph[i]);
    d = std::min(d, 180 - d);
    if (d < best_d) best_d = d, best = static_cast<int>(i);
  }
  return best;
}

}  // namespace

ClipAnalysis analyse_clip(const at::Tensor& video_in) {
  if (video_in.dim() != 4 || video_in.size(1) != 3) throw Error("analyse_clip: video must be [T, 3, H, W]");
  const at::Tensor v = (video_in.detach().to(at::kCPU, at::kFloat).clamp(0, 1) * 255.0)
                           .round()
                           .to(at::kByte)
                           .permute({0, 2, 3, 1})
                           .contiguous();  // [T, H, W, 3] RGB
  const int64_t T = v.size(0), H = v.size(1), W = v.size(2);
  ClipAnalysis a;
  std::vector<int64_t> votes(color_names().size(), 0);
  std::vector<std::pair<double, double>> track;  // centroid per frame with an object
  double frac = 0;
  for (int64_t t = 0; t < T; ++t) {
    cv::Mat rgb(static_cast<int>(H), static_cast<int>(W), CV_8UC3, v[t].data_ptr<uint8_t>()), hsv, mask;
    cv::cvtColor(rgb, hsv, cv::COLOR_RGB2HSV);
    cv::inRange(hsv, cv::Scalar(0, kMinSaturation, kMinValue), cv::Scalar(180, 255, 255), mask);
    const cv::Moments m = cv::moments(mask, true);
    if (m.m00 < kMinPixels) continue;
    track.emplace_back(m.m10 / m.m00, m.m01 / m.m00);
    frac += m.m00 / static_cast<double>(H * W);
    for (int y = 0; y < hsv.rows; ++y)
      for (int x = 0; x < hsv.cols; ++x)
        if (mask.at<uint8_t>(y, x)) ++votes[static_cast<size_t>(nearest_color(hsv.at<cv::Vec3b>(y, x)[0]))];
  }
  a.frames_with_object = static_cast<int64_t>(track.size());
  a.object_fraction = T > 0 ? frac / static_cast<double>(T) : 0;
  if (track.size() < 2) return a;
  size_t best = 0;
  for (size_t i = 1; i < votes.size(); ++i)
    if (votes[i] > votes[best]) best = i;
  a.color = color_names()[best];
  const size_t q = std::max<size_t>(1, track.size() / 4);
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  for (size_t i = 0; i < q; ++i) {
    x0 += track[i].first, y0 += track[i].second;
    x1 += track[track.size() - 1 - i].first, y1 += track[track.size() - 1 - i].second;
  }
  a.dx = (x1 - x0) / static_cast<double>(q);
  a.dy = (y1 - y0) / static_cast<double>(q);
  if (std::max(std::fabs(a.dx), std::fabs(a.dy)) < kMinTravel) return a;
  if (std::fabs(a.dx) >= std::fabs(a.dy)) a.direction = a.dx < 0 ? "left" : "right";
  else a.direction = a.dy < 0 ? "up" : "down";
  return a;
}

EvalItem check(const SceneSpec& scene, const at::Tensor& video) {
  EvalItem it;
  it.scene = scene;
  it.got = analyse_clip(video);
  const auto truth = scene.truth();
  it.color_ok = it.got.color == truth.at("color").get<std::string>();
  it.direction_ok = truth.contains("direction") && it.got.direction == truth.at("direction").get<std::string>();
  return it;
}

EvalReport summarise(std::vector<EvalItem> items) {
  EvalReport r;
  r.items = std::move(items);
  if (r.items.empty()) return r;
  double c = 0, d = 0, s = 0;
  for (const auto& it : r.items) {
    c += it.color_ok;
    d += it.direction_ok;
    s += it.color_ok && it.direction_ok;
  }
  const double n = static_cast<double>(r.items.size());
  r.color_accuracy = c / n, r.direction_accuracy = d / n, r.score = s / n;
  return r;
}

double chance_score() {
  return 1.0 / static_cast<double>(color_names().size() * direction_names().size());
}

nlohmann::json EvalReport::to_json() const {
  nlohmann::json items_j = nlohmann::json::array();
  for (const auto& it : items)
    items_j.push_back({{"caption", it.scene.caption},
                       {"truth", it.scene.truth()},
                       {"color", it.got.color},
                       {"direction", it.got.direction},
                       {"dx", it.got.dx},
                       {"dy", it.got.dy},
                       {"object_fraction", it.got.object_fraction},
                       {"frames_with_object", it.got.frames_with_object},
                       {"color_ok", it.color_ok},
                       {"direction_ok", it.direction_ok}});
  return {{"clips", items.size()},
          {"score", score},
          {"color_accuracy", color_accuracy},
          {"direction_accuracy", direction_accuracy},
          {"chance_score", chance_score()},
          {"items", items_j}};
}

}  // namespace autooptim::train
