#pragma once
// Deterministic artifact detectors of the visual-check gate (harness.md gate 6): black, frozen, NaN and
// saturated frames, blockiness on the latent/patch grid, banding, colour shift and flicker spikes.
// Each detector measures a value and decides `present` against a threshold; new_artifacts() then asks
// the gate's question: does the candidate have an artifact that the baseline does not? Comparisons use
// margins so a candidate that sits at the baseline's level (within numeric noise) does not trip.
// Frames as in metrics.h: RGB, CV_8UC3 or CV_32FC3 in [0,1]; all levels in 8-bit units.
#include <opencv2/core.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "gates/metrics.h"

namespace autooptim::gates {

// Thresholds and comparison margins, with the reasoning for each default.
struct DetectorThresholds {
  // A frame is black when its mean luma is below this: a failed decode or NaN cast to 8-bit gives ~0; a
  // generated night scene still averages well above 10 levels.
  double black_mean_luma = 10.0;
  // A transition is frozen when the mean |difference| over pixels and channels is below this: a tenth
  // of a level on average means the frame was repeated; any generated motion or noise is far above.
  double frozen_mean_abs_diff = 0.1;
  // Saturation: the fraction of pixels at 0 or 255 in the worst channel. Generated clips clip some
  // highlights; over 10% of the frame clipped in one channel is a blown-out output.
  double saturated_fraction = 0.10;
  // Blockiness: mean gradient across grid lines over the mean gradient elsewhere; ~1 for natural
  // content, >> 1 when the picture is made of blocks aligned to the 16/32-pixel grid.
  double blockiness_ratio = 1.3;
  // Banding: staircase steps per flat pair (see detect_banding), worst direction; 0 for natural 8-bit
  // gradients and for noise. One step per 500 flat pairs is a band every ~500 pixels of smooth area.
  double banding_score = 0.002;
  // Flicker spike: the worst transition over the median transition (metrics.h), and at least this
  // many levels above the median so a static clip's one-level noise does not count.
  double flicker_spike = 3.0;
  double flicker_min_excess = 2.0;
  // Colour shift: the largest per-channel mean difference against the baseline, in levels.
  double colour_shift = 4.0;
};

// Margins of new_artifacts(): how much worse than the baseline a candidate must be.
struct ArtifactMargins {
  double black_luma = 5.0;           // the baseline frame must be at least this far above the black threshold
  double frozen_factor = 5.0;        // the baseline transition must differ by >= factor * frozen threshold
  double saturated_fraction = 0.05;  // the candidate clips >= 5 points more of the frame
  double blockiness = 0.15;          // ratio above the baseline's
  double banding = 0.002;            // score above 1.5x the baseline's plus this
  double flicker_spike = 1.0;        // spike above 1.25x the baseline's and at least this much higher
};

struct BlackFrames {
  std::vector<double> mean_luma;  // per frame
  std::vector<int> frames;        // indices of black frames
  bool present = false;
};

struct FrozenFrames {
  std::vector<double> diffs;     // mean |frame t+1 - frame t|, per transition
  std::vector<int> transitions;  // t where frame t+1 repeats frame t
  int longest_run = 0;           // longest chain of frozen transitions
  bool present = false;
};

struct NanSaturation {
  int64_t nonfinite = 0;              // NaN/Inf values (float frames only; 8-bit frames cannot hold them)
  std::vector<int> nonfinite_frames;  // frames holding one
  // Fraction of pixels that are 0 / 255 per channel over the clip, after 8-bit rounding (so a float
  // value below 0.5/255 counts as 0 and one above 254.5/255 as 255).
  double low_fraction[3] = {0, 0, 0};
  double high_fraction[3] = {0, 0, 0};
  double saturated = 0;  // max over channels of low + high
  bool nonfinite_present = false;
  bool saturated_present = false;
};

struct Blockiness {
  double ratio16 = 1, ratio32 = 1;  // boundary / interior gradient on the 16- and 32-pixel grids
  double score = 1;                 // max of the two
  bool present = false;
};

struct Banding {
  int64_t steps[2] = {0, 0};       // staircase steps found along rows, columns
  int64_t flat_pairs[2] = {0, 0};  // neighbouring pixel pairs of equal value
  double score = 0;                // max over the two directions of steps / flat_pairs
  bool present = false;
};

struct ColourShift {
  double shift[3] = {0, 0, 0};  // candidate - baseline mean per RGB channel, levels
  double max_abs = 0;
  bool present = false;
};

struct FlickerSpikes {
  Flicker flicker;
  bool present = false;
};

// Every detector on one clip. Colour shift needs a reference, so the report keeps the per-channel means
// and new_artifacts() derives the shift from the two reports.
struct VisualReport {
  int frames = 0, width = 0, height = 0;
  BlackFrames black;
  FrozenFrames frozen;
  NanSaturation nan_saturation;
  Blockiness blockiness;
  Banding banding;
  double channel_mean[3] = {0, 0, 0};
  FlickerSpikes flicker;
  DetectorThresholds thresholds;
};

BlackFrames detect_black(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});
FrozenFrames detect_frozen(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});
NanSaturation detect_nan_saturation(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});
Blockiness detect_blockiness(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});
// A staircase step is a neighbour difference of 2..24 levels (1 is the 8-bit quantisation floor, over
// 24 is an edge) with a flat run (6 neighbour pairs of equal value) on both sides, along rows and
// columns of the 8-bit luma. A smooth 8-bit ramp of any slope has no such step (below one level per
// pixel it steps by 1; above, it has no flat runs); a ramp quantised to few levels has one per band.
// score = steps / flat pairs, in the worse direction. Blocks of constant colour (see blockiness) also
// make steps, so a blocky clip usually shows banding too.
Banding detect_banding(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});
ColourShift detect_colour_shift(const std::vector<cv::Mat>& candidate, const std::vector<cv::Mat>& baseline,
                                const DetectorThresholds& th = {});
FlickerSpikes detect_flicker_spikes(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});

VisualReport visual_report(const std::vector<cv::Mat>& frames, const DetectorThresholds& th = {});

// Per-detector comparisons: a reason when the candidate has the artifact beyond the baseline, else "".
std::string black_beyond(const BlackFrames& cand, const BlackFrames& base, const DetectorThresholds& th = {},
                         const ArtifactMargins& m = {});
std::string frozen_beyond(const FrozenFrames& cand, const FrozenFrames& base, const DetectorThresholds& th = {},
                          const ArtifactMargins& m = {});
std::string nonfinite_beyond(const NanSaturation& cand, const NanSaturation& base);
std::string saturation_beyond(const NanSaturation& cand, const NanSaturation& base, const ArtifactMargins& m = {});
std::string blockiness_beyond(const Blockiness& cand, const Blockiness& base, const ArtifactMargins& m = {});
std::string banding_beyond(const Banding& cand, const Banding& base, const ArtifactMargins& m = {});
std::string flicker_beyond(const FlickerSpikes& cand, const FlickerSpikes& base, const ArtifactMargins& m = {});
std::string colour_shift_reason(const ColourShift& shift);

// One reason per artifact that the candidate has and the baseline lacks; empty when the gate passes.
// The candidate's thresholds decide presence.
std::vector<std::string> new_artifacts(const VisualReport& candidate, const VisualReport& baseline,
                                       const ArtifactMargins& m = {});

nlohmann::json to_json(const VisualReport& r);
nlohmann::json to_json(const ColourShift& c);

// The one object of a procedural scene (wan22-tiny's captions: one saturated palette-coloured shape moving
// over a dark, grey, striped or checkered background, all of low saturation): per frame, the pixels of HSV
// saturation and value above the thresholds below (8-bit, OpenCV's HSV: hue 0..179); a frame with fewer
// than min_pixels of them shows no object. What the object is (its hue) and where it goes (its centroid
// from the first quarter of the track to the last) are what a caption asks, and what PSNR against the
// baseline cannot see: a clip 30 dB from the baseline's may have lost the motion.
struct ObjectTrackThresholds {
  int min_saturation = 80;  // of 255: the backgrounds stay well below, the palette well above
  int min_value = 60;
  int min_pixels = 8;  // per frame
};

struct ObjectTrack {
  std::vector<int> frames;             // the frames that show the object
  std::vector<cv::Point2d> centroids;  // its centroid in each of them, pixels
  std::vector<int64_t> hue_histogram;  // 180 bins: the hues of its pixels over the clip
  double object_fraction = 0;          // mean share of a frame's pixels taken as the object (all frames)
  double hue = -1;                     // circular mean of those hues, 0..180 (-1: no object)
  double dx = 0, dy = 0;               // centroid displacement, last quarter of the track minus the first
  bool present = false;                // the object is in at least two frames
};

ObjectTrack detect_object_track(const std::vector<cv::Mat>& frames, const ObjectTrackThresholds& th = {});

// Margins of lost_semantics(), with the reasoning for each default.
struct SemanticMargins {
  // The baseline must travel at least this many pixels for its motion to count (eval-tiny's "did not
  // move" bound), and the candidate must keep at least this share of that travel along the baseline's
  // direction: a clip whose object stops, slows to under half or turns away has lost the caption's motion.
  double min_travel = 4.0;
  double kept_travel = 0.5;
  // Circular distance of the mean hues, OpenCV units (2 degrees each): the palette's colours are 30 or
  // more apart, bf16 and cache noise moves a hue by 1-2.
  double hue = 15.0;
  // A baseline whose saturated pixels cover more than this share of the frame shows no single object
  // (random weights' noise covers ~90%, an open scene): there is nothing to compare. The trained
  // wan22-tiny's objects, with the saturated fringe it draws around them, cover 20-30% in its clips.
  double max_object_fraction = 0.5;
};

// Whether the baseline's clip shows one object whose loss lost_semantics() can judge.
bool single_object(const ObjectTrack& baseline, const SemanticMargins& m = {});

// What the candidate's clip lost of the baseline's object: one reason each for an object gone, its colour
// changed, its motion lost. Empty when the baseline shows no single object, or the candidate keeps it.
std::vector<std::string> lost_semantics(const ObjectTrack& candidate, const ObjectTrack& baseline,
                                        const SemanticMargins& m = {});

nlohmann::json to_json(const ObjectTrack& t);

}  // namespace autooptim::gates
