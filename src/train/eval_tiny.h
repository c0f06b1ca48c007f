#pragma once
// Did wan22-tiny learn what it was asked? A measurement, not a look: in each clip the saturated pixels
// (the object; the backgrounds are dark and grey) are segmented in HSV (the gate's detect_object_track,
// gates/detectors.h), their hue votes for the nearest palette colour, and the centroid track from the
// first to the last quarter of the clip gives the direction of motion; both are checked against the
// caption's truth.
#include <ATen/ATen.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/scenes.h"

namespace autooptim::train {

struct ClipAnalysis {
  std::string color = "none";      // a palette colour name, or none (no saturated object seen)
  std::string direction = "none";  // left/right/up/down, or none (no object or it did not move)
  double dx = 0, dy = 0;           // centroid displacement in pixels (first to last quarter)
  double object_fraction = 0;      // mean share of the frame's pixels taken as the object
  int64_t frames_with_object = 0;
};

// video: [T, 3, H, W] float in [0, 1] (any device).
ClipAnalysis analyse_clip(const at::Tensor& video);

struct EvalItem {
  SceneSpec scene;
  ClipAnalysis got;
  bool color_ok = false, direction_ok = false;
};

struct EvalReport {
  std::vector<EvalItem> items;
  double color_accuracy = 0, direction_accuracy = 0, score = 0;  // score: both right
  nlohmann::json to_json() const;
};

EvalItem check(const SceneSpec& scene, const at::Tensor& video);
EvalReport summarise(std::vector<EvalItem> items);

// The chance level of the score: one colour of the palette and one of four directions at random.
double chance_score();

}  // namespace autooptim::train
