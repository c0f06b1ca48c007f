#pragma once
// Full-reference quality (PSNR, SSIM) and temporal consistency (flicker, warping error) of decoded clips.
// Frames are cv::Mat, RGB channel order, either CV_8UC3 or CV_32FC3 in [0,1] (single-channel frames are
// accepted too). Every value is in 8-bit units: float frames are scaled by 255 without rounding, so a
// float frame and its 8-bit rounding differ by at most half a level.
#include <opencv2/core.hpp>

#include <nlohmann/json.hpp>

#include <limits>
#include <vector>

namespace autooptim::gates {

// PSNR is capped here: identical frames have infinite PSNR, which JSON cannot hold, and anything above
// 100 dB (RMS error below 1/400 of a level) is indistinguishable from identical for 8-bit output.
constexpr double kPsnrCap = 100.0;

// The frame as CV_32FC(n) in [0,255]; throws autooptim::Error on an empty or unsupported frame.
cv::Mat to_float255(const cv::Mat& frame);
// BT.601 luma (0.299 R + 0.587 G + 0.114 B) as CV_32FC1 in [0,255]; a 1-channel frame is its own luma.
cv::Mat luma255(const cv::Mat& frame);

// 10 log10(255^2 / MSE) over all pixels and channels, capped at kPsnrCap. NaN when a frame holds NaN.
double psnr(const cv::Mat& a, const cv::Mat& b);

// SSIM of Wang et al. 2004: Gaussian window 11x11, sigma 1.5, K1 0.01, K2 0.03, L 255, statistics over
// the "valid" region (the 5-pixel border where the window leaves the frame is excluded, as in the
// reference implementation), computed per RGB channel and averaged over the channels. Symmetric;
// 1 exactly for identical frames. Frames must be at least 11x11.
double ssim(const cv::Mat& a, const cv::Mat& b);

struct ClipQuality {
  std::vector<double> psnr, ssim;                                   // per frame
  double psnr_mean = 0, psnr_min = 0, ssim_mean = 0, ssim_min = 0;  // NaN if any frame's value is NaN
};
// Frame by frame; throws autooptim::Error when the clips differ in frame count or frame size, or are empty.
ClipQuality compare_clips(const std::vector<cv::Mat>& ours, const std::vector<cv::Mat>& ref);

// Temporal flicker: diffs[t] = mean |Y(t+1) - Y(t)| over pixels (luma, 8-bit units), one per transition.
// spike = max(diffs) / max(median(diffs), kFlickerMedianFloor): how far the worst transition stands out
// from the clip's typical motion. The floor keeps a static clip (median ~0) from dividing by zero, so a
// one-level jump in a frozen clip is not a "spike" of 1e9.
constexpr double kFlickerMedianFloor = 1.0;
struct Flicker {
  std::vector<double> diffs;
  double mean = 0, median = 0, max = 0, spike = 0;
};
Flicker temporal_flicker(const std::vector<cv::Mat>& frames);

// Warping error: the optical flow from frame t+1 to frame t (DIS, PRESET_FAST, on 8-bit luma;
// MEDIUM costs ~4x for no change in the ranking of clips) warps
// frame t onto frame t+1 (cv::remap, bilinear); the error is mean |warped - frame t+1| over pixels and
// channels in 8-bit units. With mask_occlusions, pixels that fail the forward-backward consistency check
// (|f + b|^2 > 0.01 (|f|^2 + |b|^2) + 0.5, Sundaram et al. 2010) or whose source lies outside the frame
// are left out; a transition whose mask keeps under 10% of the pixels is measured unmasked.
struct WarpError {
  std::vector<double> errors;          // per transition
  std::vector<double> valid_fraction;  // fraction of pixels measured, per transition
  double mean = 0, max = 0;
};
WarpError warping_error(const std::vector<cv::Mat>& frames, bool mask_occlusions = true);

nlohmann::json to_json(const ClipQuality& q);
nlohmann::json to_json(const Flicker& f);
nlohmann::json to_json(const WarpError& w);

}  // namespace autooptim::gates
