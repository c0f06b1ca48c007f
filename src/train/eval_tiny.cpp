#include "train/eval_tiny.h"

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>

#include "gates/detectors.h"
#include "base/error.h"
#include "runtime/video_io.h"

namespace autooptim::train {
namespace {

// Pixels: less is "did not move" (the gate's bound for a motion to keep).
constexpr double kMinTravel = gates::SemanticMargins{}.min_travel;

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
  // The gate's detector (gates/detectors.h) on the 8-bit clip; its hues vote for the palette here.
  const gates::ObjectTrack track = gates::detect_object_track(runtime::frames_from_tensor(video_in));
  ClipAnalysis a;
  a.frames_with_object = static_cast<int64_t>(track.frames.size());
  a.object_fraction = track.object_fraction;
  if (!track.present) return a;
  std::vector<int64_t> votes(color_names().size(), 0);
  for (int h = 0; h < static_cast<int>(track.hue_histogram.size()); ++h)
    votes[static_cast<size_t>(nearest_color(h))] += track.hue_histogram[static_cast<size_t>(h)];
  size_t best = 0;
  for (size_t i = 1; i < votes.size(); ++i)
    if (votes[i] > votes[best]) best = i;
  a.color = color_names()[best];
  a.dx = track.dx;
  a.dy = track.dy;
  if (std::max(std::fabs(a.dx), std::fabs(a.dy)) < kMinTravel) return a;
  if (std::fabs(a.dx) >= std::fabs(a.dy))
    a.direction = a.dx < 0 ? "left" : "right";
  else
    a.direction = a.dy < 0 ? "up" : "down";
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

double chance_score() { return 1.0 / static_cast<double>(color_names().size() * direction_names().size()); }

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
