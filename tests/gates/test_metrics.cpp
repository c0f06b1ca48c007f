// Quality metrics and artifact detectors: each on clips made to have the defect and clips made not to,
// with the measured numbers checked against what the construction implies.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <limits>

#include "gates/detectors.h"
#include "gates/metrics.h"
#include "base/error.h"

using namespace autooptim;
using namespace autooptim::gates;

namespace {

constexpr int kW = 160, kH = 128, kT = 12;
using Clip = std::vector<cv::Mat>;

// A smooth, non-grid-aligned pattern drifting at constant speed: no artifact of any kind.
cv::Mat smooth_frame(int t, int w = kW, int h = kH) {
  cv::Mat f(h, w, CV_8UC3);
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < w; ++j) {
      const double s = std::sin(2 * M_PI * (j + 1.0 * t) / 53.0) * std::cos(2 * M_PI * (i - 0.7 * t) / 41.0);
      const double v = 128 + 50 * s + 0.2 * (j - w / 2);
      f.at<cv::Vec3b>(i, j) = cv::Vec3b(cv::saturate_cast<uint8_t>(v + 10), cv::saturate_cast<uint8_t>(v),
                                        cv::saturate_cast<uint8_t>(v - 15));
    }
  return f;
}

// Clips copy cv::Mat headers, not pixels; edits go to a deep copy.
Clip deep(const Clip& c) {
  Clip out;
  for (const auto& m : c) out.push_back(m.clone());
  return out;
}

Clip smooth_clip(int n = kT) {
  Clip c;
  for (int t = 0; t < n; ++t) c.push_back(smooth_frame(t));
  return c;
}

// Blurred random texture (deterministic), ~40 levels of contrast; `dx, dy` translate it.
cv::Mat texture(uint64_t seed, int dx = 0, int dy = 0, int w = kW, int h = kH) {
  cv::RNG rng(seed);
  cv::Mat big(h + 64, w + 64, CV_32FC3);
  rng.fill(big, cv::RNG::NORMAL, 0.0, 1.0);
  cv::GaussianBlur(big, big, cv::Size(0, 0), 2.0);
  cv::normalize(big, big, 30, 225, cv::NORM_MINMAX);
  cv::Mat out;
  big(cv::Rect(32 - dx, 32 - dy, w, h)).convertTo(out, CV_8UC3);
  return out;
}

cv::Mat clone_with(const cv::Mat& f, const std::function<void(cv::Mat&)>& edit) {
  cv::Mat c = f.clone();
  edit(c);
  return c;
}

cv::Mat block_pool(const cv::Mat& f, int block) {
  cv::Mat small, out;
  cv::resize(f, small, cv::Size(f.cols / block, f.rows / block), 0, 0, cv::INTER_AREA);
  cv::resize(small, out, f.size(), 0, 0, cv::INTER_NEAREST);
  return out;
}

double luma_mean(const cv::Mat& f) { return cv::mean(luma255(f))[0]; }

}  // namespace

// ---------------------------------------------------------------- PSNR / SSIM

TEST(Psnr, ConstantOffsetMatchesFormula) {
  const cv::Mat a = texture(1);
  for (int d : {1, 5, 20}) {
    cv::Mat b;
    cv::add(a, cv::Scalar::all(d), b);  // texture stays below 255 - d? check that no pixel clipped
    cv::Mat diff;
    cv::absdiff(a, b, diff);
    ASSERT_EQ(cv::countNonZero(diff.reshape(1) != d), 0) << "texture clipped";
    EXPECT_NEAR(psnr(a, b), 20 * std::log10(255.0 / d), 1e-9) << d;
    EXPECT_NEAR(psnr(b, a), 20 * std::log10(255.0 / d), 1e-9) << d;
  }
}

TEST(Psnr, RandomSignNoiseAndFloatFrames) {
  const cv::Mat a = texture(2);
  cv::Mat b = a.clone();
  cv::RNG rng(7);
  for (auto it = b.begin<cv::Vec3b>(); it != b.end<cv::Vec3b>(); ++it)
    for (int c = 0; c < 3; ++c) (*it)[c] = cv::saturate_cast<uint8_t>((*it)[c] + (rng.uniform(0, 2) ? 4 : -4));
  EXPECT_NEAR(psnr(a, b), 20 * std::log10(255.0 / 4), 1e-9);
  // The same frames as float in [0,1] give the same PSNR (8-bit peak).
  cv::Mat fa, fb;
  a.convertTo(fa, CV_32FC3, 1 / 255.0);
  b.convertTo(fb, CV_32FC3, 1 / 255.0);
  EXPECT_NEAR(psnr(fa, fb), 20 * std::log10(255.0 / 4), 1e-3);
}

TEST(Psnr, IdenticalIsCappedAndNanPropagates) {
  const cv::Mat a = texture(3);
  EXPECT_EQ(psnr(a, a), kPsnrCap);
  cv::Mat f;
  a.convertTo(f, CV_32FC3, 1 / 255.0);
  cv::Mat g = f.clone();
  g.at<cv::Vec3f>(5, 5)[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(psnr(f, g)));
  EXPECT_THROW(psnr(a, texture(3, 0, 0, 64, 64)), Error);
}

TEST(Ssim, IdenticalNoisyAndSymmetric) {
  const cv::Mat a = texture(4);
  EXPECT_DOUBLE_EQ(ssim(a, a), 1.0);
  cv::Mat noise(a.size(), CV_32FC3), b;
  cv::RNG(9).fill(noise, cv::RNG::NORMAL, 0.0, 20.0);
  cv::Mat af;
  a.convertTo(af, CV_32FC3);
  cv::Mat(af + noise).convertTo(b, CV_8UC3);
  const double s = ssim(a, b);
  EXPECT_LT(s, 0.9);
  EXPECT_GT(s, 0.0);
  EXPECT_NEAR(ssim(b, a), s, 1e-12);
  EXPECT_GT(ssim(a, b), ssim(a, texture(5)));  // an unrelated frame is worse still
}

TEST(Ssim, ConstantFramesMatchClosedForm) {
  // No variance: SSIM reduces to the luminance term (2 x y + C1) / (x^2 + y^2 + C1).
  const cv::Mat a(32, 32, CV_8UC3, cv::Scalar::all(100)), b(32, 32, CV_8UC3, cv::Scalar::all(140));
  const double c1 = (0.01 * 255) * (0.01 * 255);
  EXPECT_NEAR(ssim(a, b), (2 * 100.0 * 140 + c1) / (100.0 * 100 + 140.0 * 140 + c1), 1e-5);  // float32 maps
  EXPECT_THROW(ssim(cv::Mat(8, 8, CV_8UC3), cv::Mat(8, 8, CV_8UC3)), Error);
}

TEST(CompareClips, PerFrameAndAggregates) {
  const Clip ref = smooth_clip(4);
  Clip ours = deep(ref);
  cv::add(ref[2], cv::Scalar::all(8), ours[2]);
  const ClipQuality q = compare_clips(ours, ref);
  ASSERT_EQ(q.psnr.size(), 4u);
  EXPECT_EQ(q.psnr[0], kPsnrCap);
  EXPECT_LT(q.psnr[2], 20 * std::log10(255.0 / 8) + 0.5);  // a few pixels clip at 255: slightly above
  EXPECT_EQ(q.psnr_min, q.psnr[2]);
  EXPECT_NEAR(q.psnr_mean, (3 * kPsnrCap + q.psnr[2]) / 4, 1e-9);
  EXPECT_EQ(q.ssim[1], 1.0);
  EXPECT_LT(q.ssim_min, 1.0);
  EXPECT_EQ(q.ssim_min, q.ssim[2]);
  EXPECT_EQ(to_json(q)["psnr"].size(), 4u);

  EXPECT_THROW(compare_clips(Clip(ref.begin(), ref.begin() + 3), ref), Error);
  Clip resized = deep(ref);
  resized[1] = texture(1, 0, 0, 64, 64);
  EXPECT_THROW(compare_clips(resized, ref), Error);
  EXPECT_THROW(compare_clips({}, {}), Error);
}

// ---------------------------------------------------------------- temporal metrics

TEST(Flicker, BrightenedFrameIsASpike) {
  const Clip clean = smooth_clip();
  const Flicker f0 = temporal_flicker(clean);
  ASSERT_EQ(f0.diffs.size(), static_cast<size_t>(kT - 1));
  EXPECT_LT(f0.spike, 1.5);
  EXPECT_GT(f0.median, 1.0);  // it does move

  Clip bright = deep(clean);
  cv::add(clean[6], cv::Scalar::all(30), bright[6]);
  const Flicker f1 = temporal_flicker(bright);
  EXPECT_GT(f1.diffs[5], 20.0);  // into and out of the bright frame
  EXPECT_GT(f1.diffs[6], 20.0);
  EXPECT_NEAR(f1.median, f0.median, 0.5);
  EXPECT_GT(f1.spike, 5.0);
  EXPECT_FALSE(detect_flicker_spikes(clean).present);
  EXPECT_TRUE(detect_flicker_spikes(bright).present);

  // A static clip with one-level noise is not a spike (median floor, minimum excess).
  Clip still;
  for (int t = 0; t < kT; ++t) still.push_back(clean[0].clone());
  cv::add(clean[0], cv::Scalar::all(1), still[3]);
  EXPECT_FALSE(detect_flicker_spikes(still).present);
}

TEST(WarpingError, TranslationLowShuffleHigh) {
  Clip moving, shuffled;
  for (int t = 0; t < 5; ++t) {
    moving.push_back(texture(11, 2 * t, t));
    shuffled.push_back(texture(100 + t));
  }
  const WarpError wm = warping_error(moving);
  const WarpError ws = warping_error(shuffled);
  ASSERT_EQ(wm.errors.size(), 4u);
  EXPECT_LT(wm.mean, 3.0);
  EXPECT_GT(ws.mean, 10.0);
  EXPECT_LT(wm.mean * 4, ws.mean);
  EXPECT_GT(wm.valid_fraction[0], 0.8);
  const WarpError unmasked = warping_error(moving, false);
  EXPECT_EQ(unmasked.valid_fraction[0], 1.0);
  EXPECT_LT(unmasked.mean, 5.0);
  EXPECT_TRUE(warping_error({moving[0]}).errors.empty());
}

// ---------------------------------------------------------------- detectors

TEST(Detectors, CleanClipHasNoArtifact) {
  const Clip clean = smooth_clip();
  const VisualReport r = visual_report(clean);
  EXPECT_FALSE(r.black.present);
  EXPECT_FALSE(r.frozen.present);
  EXPECT_FALSE(r.nan_saturation.nonfinite_present);
  EXPECT_FALSE(r.nan_saturation.saturated_present);
  EXPECT_FALSE(r.blockiness.present) << r.blockiness.score;
  EXPECT_NEAR(r.blockiness.score, 1.0, 0.1);
  EXPECT_FALSE(r.banding.present) << r.banding.score;
  EXPECT_FALSE(r.flicker.present);
  EXPECT_TRUE(new_artifacts(r, r).empty());
  // A textured clip is clean too.
  Clip tex;
  for (int t = 0; t < 4; ++t) tex.push_back(texture(20, t, 0));
  const VisualReport rt = visual_report(tex);
  EXPECT_FALSE(rt.blockiness.present) << rt.blockiness.score;
  EXPECT_FALSE(rt.banding.present) << rt.banding.score;
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["frames"], kT);
  EXPECT_EQ(j["black"]["present"], false);
}

TEST(Detectors, BlackFrames) {
  Clip c = smooth_clip();
  c[4] = cv::Mat::zeros(kH, kW, CV_8UC3);
  c[7] = cv::Mat(kH, kW, CV_8UC3, cv::Scalar::all(6));
  const BlackFrames b = detect_black(c);
  EXPECT_TRUE(b.present);
  EXPECT_EQ(b.frames, (std::vector<int>{4, 7}));
  EXPECT_DOUBLE_EQ(b.mean_luma[4], 0.0);
  EXPECT_NEAR(b.mean_luma[7], 6.0, 1e-4);
  EXPECT_NEAR(b.mean_luma[0], luma_mean(c[0]), 1e-3);
  EXPECT_FALSE(detect_black(smooth_clip()).present);
}

TEST(Detectors, FrozenFrames) {
  Clip c = smooth_clip();
  c[6] = c[5].clone();
  c[7] = c[5].clone();
  const FrozenFrames f = detect_frozen(c);
  EXPECT_TRUE(f.present);
  EXPECT_EQ(f.transitions, (std::vector<int>{5, 6}));
  EXPECT_EQ(f.longest_run, 2);
  EXPECT_EQ(f.diffs[5], 0.0);
  EXPECT_GT(f.diffs[0], 1.0);
  EXPECT_FALSE(detect_frozen(smooth_clip()).present);
}

TEST(Detectors, NanAndSaturation) {
  Clip f;
  for (const auto& m : smooth_clip(4)) {
    cv::Mat x;
    m.convertTo(x, CV_32FC3, 1 / 255.0);
    f.push_back(x);
  }
  EXPECT_FALSE(detect_nan_saturation(f).nonfinite_present);
  Clip nan = deep(f);
  nan[2] = f[2].clone();
  nan[2].at<cv::Vec3f>(3, 4)[0] = std::numeric_limits<float>::quiet_NaN();
  nan[2].at<cv::Vec3f>(9, 9)[2] = std::numeric_limits<float>::infinity();
  const NanSaturation n = detect_nan_saturation(nan);
  EXPECT_TRUE(n.nonfinite_present);
  EXPECT_EQ(n.nonfinite, 2);
  EXPECT_EQ(n.nonfinite_frames, (std::vector<int>{2}));

  const NanSaturation clean = detect_nan_saturation(smooth_clip());
  EXPECT_FALSE(clean.saturated_present) << clean.saturated;
  // Stretch the contrast 4x around mid-grey: most pixels clip.
  Clip sat;
  for (const auto& m : smooth_clip()) {
    cv::Mat x;
    m.convertTo(x, CV_8UC3, 4.0, -3 * 128.0);
    sat.push_back(x);
  }
  const NanSaturation s = detect_nan_saturation(sat);
  EXPECT_TRUE(s.saturated_present);
  EXPECT_GT(s.saturated, 0.3);
  EXPECT_GT(s.low_fraction[0] + s.high_fraction[0], 0.2);
  // Float values out of [0,1] count as clipped.
  Clip over = deep(f);
  over[0] = f[0] * 3.0;
  EXPECT_GT(detect_nan_saturation(over).high_fraction[1], 0.2);
}

TEST(Detectors, BlockinessOnTheGrid) {
  for (int block : {8, 16, 32}) {
    Clip c;
    for (const auto& m : smooth_clip()) c.push_back(block_pool(m, block));
    const Blockiness b = detect_blockiness(c);
    EXPECT_TRUE(b.present) << block;
    EXPECT_GT(b.score, 3.0) << block;
  }
  // The same clip shifted off the grid by 5 pixels is not on the 16/32 grid (8 px blocks remain 8-periodic
  // and hit the 16 grid every other line, so shift 16-pixel blocks).
  Clip off;
  for (const auto& m : smooth_clip()) {
    cv::Mat p = block_pool(m, 16), shifted;
    const cv::Mat t = (cv::Mat_<double>(2, 3) << 1, 0, 5, 0, 1, 5);
    cv::warpAffine(p, shifted, t, p.size(), cv::INTER_NEAREST, cv::BORDER_REPLICATE);
    off.push_back(shifted);
  }
  EXPECT_LT(detect_blockiness(off).score, 1.3);
}

TEST(Detectors, BandingOfAQuantisedRamp) {
  Clip smooth, banded;
  for (int t = 0; t < 4; ++t) {
    cv::Mat s(kH, kW, CV_8UC3), b(kH, kW, CV_8UC3);
    for (int i = 0; i < kH; ++i)
      for (int j = 0; j < kW; ++j) {
        const double v = 30 + 180.0 * (j + 0.3 * i + 2 * t) / (kW + 0.3 * kH);  // ~1.1 levels per pixel
        s.at<cv::Vec3b>(i, j) = cv::Vec3b::all(cv::saturate_cast<uint8_t>(v));
        b.at<cv::Vec3b>(i, j) = cv::Vec3b::all(cv::saturate_cast<uint8_t>(std::floor(v / 12) * 12));
      }
    smooth.push_back(s);
    banded.push_back(b);
  }
  const Banding bs = detect_banding(smooth), bb = detect_banding(banded);
  EXPECT_EQ(bs.steps[0] + bs.steps[1], 0);
  EXPECT_FALSE(bs.present);
  EXPECT_TRUE(bb.present);
  EXPECT_GT(bb.score, 0.03);  // a step every ~11 pixels along rows
  // Also on the smooth pattern of the other tests, quantised to 20 levels.
  Clip q;
  for (const auto& m : smooth_clip()) {
    cv::Mat x = m.clone();
    cv::Mat flat = x.reshape(1);
    for (auto it = flat.begin<uint8_t>(); it != flat.end<uint8_t>(); ++it) *it = static_cast<uint8_t>(*it / 20 * 20);
    q.push_back(x);
  }
  const Banding bq = detect_banding(q);
  EXPECT_TRUE(bq.present) << bq.score << " " << bq.steps[0] << " " << bq.steps[1] << " " << bq.flat_pairs[0] << " "
                          << bq.flat_pairs[1];
}

TEST(Detectors, ColourShift) {
  const Clip base = smooth_clip();
  Clip red = deep(base), bright1 = deep(base);
  for (size_t t = 0; t < base.size(); ++t) {
    cv::add(base[t], cv::Scalar(8, 0, 0), red[t]);
    cv::add(base[t], cv::Scalar::all(1), bright1[t]);
  }
  const ColourShift s = detect_colour_shift(red, base);
  EXPECT_TRUE(s.present);
  EXPECT_NEAR(s.shift[0], 8.0, 0.3);  // a few pixels clip at 255
  EXPECT_NEAR(s.shift[1], 0.0, 1e-9);
  EXPECT_FALSE(detect_colour_shift(bright1, base).present);
  EXPECT_NEAR(detect_colour_shift(bright1, base).max_abs, 1.0, 0.05);
  EXPECT_EQ(to_json(s)["present"], true);
}

TEST(NewArtifacts, OnlyWhatTheBaselineLacks) {
  const Clip clean = smooth_clip();
  const VisualReport base = visual_report(clean);

  // One brightened frame: a flicker spike, nothing else.
  Clip bright = deep(clean);
  cv::add(clean[6], cv::Scalar::all(30), bright[6]);
  auto reasons = new_artifacts(visual_report(bright), base);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("flicker"), std::string::npos) << reasons[0];

  // Tiny differences (+-1 level noise) trip nothing.
  Clip noisy = clean;
  cv::RNG rng(5);
  for (auto& f : noisy) {
    f = f.clone();
    cv::Mat flat = f.reshape(1);
    for (auto it = flat.begin<uint8_t>(); it != flat.end<uint8_t>(); ++it)
      *it = cv::saturate_cast<uint8_t>(*it + rng.uniform(-1, 2));
  }
  reasons = new_artifacts(visual_report(noisy), base);
  EXPECT_TRUE(reasons.empty()) << reasons[0];

  // Blocky baseline and blocky candidate with a black frame: only the black frame is new.
  Clip blocky;
  for (const auto& m : clean) blocky.push_back(block_pool(m, 16));
  const VisualReport blocky_base = visual_report(blocky);
  ASSERT_TRUE(blocky_base.blockiness.present);
  Clip blocky_black = deep(blocky);
  blocky_black[3] = cv::Mat::zeros(kH, kW, CV_8UC3);
  reasons = new_artifacts(visual_report(blocky_black), blocky_base);
  ASSERT_FALSE(reasons.empty());
  EXPECT_NE(reasons[0].find("black frames: 1 (frames 3)"), std::string::npos) << reasons[0];
  for (const auto& r : reasons) EXPECT_EQ(r.find("blockiness"), std::string::npos) << r;
  // ... and against a clean baseline, the blockiness is new.
  reasons = new_artifacts(blocky_base, base);
  bool blockiness = false;
  for (const auto& r : reasons) blockiness |= r.find("blockiness") != std::string::npos;
  EXPECT_TRUE(blockiness);

  // Frozen in both: not new. Frozen only in the candidate: new.
  Clip frozen = deep(clean);
  frozen[5] = frozen[4].clone();
  const VisualReport frozen_rep = visual_report(frozen);
  for (const auto& r : new_artifacts(frozen_rep, frozen_rep)) ADD_FAILURE() << r;
  reasons = new_artifacts(frozen_rep, base);
  ASSERT_FALSE(reasons.empty());
  EXPECT_NE(reasons[0].find("frozen"), std::string::npos) << reasons[0];

  // Colour shift and saturation against the clean baseline.
  Clip red = deep(clean);
  for (auto& f : red) cv::add(f, cv::Scalar(12, 0, 0), f);
  reasons = new_artifacts(visual_report(red), base);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("colour shift"), std::string::npos) << reasons[0];

  // A NaN in float frames.
  Clip nan;
  for (const auto& m : clean) {
    cv::Mat x;
    m.convertTo(x, CV_32FC3, 1 / 255.0);
    nan.push_back(x);
  }
  const VisualReport nan_base = visual_report(nan);
  nan[1].at<cv::Vec3f>(0, 0)[0] = std::numeric_limits<float>::quiet_NaN();
  reasons = new_artifacts(visual_report(nan), nan_base);
  ASSERT_FALSE(reasons.empty());
  EXPECT_NE(reasons[0].find("NaN"), std::string::npos) << reasons[0];
  EXPECT_NO_THROW(to_json(visual_report(nan)).dump());
}

// ---------------------------------------------------------------- the object of a procedural scene

namespace {

// wan22-tiny's kind of clip: one saturated disc of colour `rgb` on a grey background with faint noise,
// its centre moving (vx, vy) pixels a frame from (x0, y0); radius 0 draws no disc.
Clip disc_clip(cv::Scalar rgb, double x0, double y0, double vx, double vy, int radius = 7, uint64_t seed = 1) {
  Clip c;
  cv::RNG rng(seed);
  for (int t = 0; t < kT; ++t) {
    cv::Mat f(kH, kW, CV_8UC3, cv::Scalar::all(110));
    cv::Mat noise(kH, kW, CV_8UC3);
    rng.fill(noise, cv::RNG::UNIFORM, 0, 4);
    f += noise;
    if (radius > 0)
      cv::circle(f, cv::Point(cvRound(x0 + vx * t), cvRound(y0 + vy * t)), radius, rgb, cv::FILLED, cv::LINE_AA);
    c.push_back(f);
  }
  return c;
}

const cv::Scalar kRed(230, 40, 40), kBlue(40, 60, 230);

}  // namespace

TEST(ObjectTrack, FindsTheDiscItsHueAndItsTravel) {
  // 3 px a frame to the right for 12 frames: the last quarter's centroids (frames 9-11) are 27 px on from
  // the first quarter's (0-2).
  const auto t = detect_object_track(disc_clip(kRed, 30, 60, 3, 0));
  ASSERT_TRUE(t.present);
  EXPECT_EQ(t.frames.size(), static_cast<size_t>(kT));
  EXPECT_NEAR(t.dx, 27.0, 0.5);
  EXPECT_NEAR(t.dy, 0.0, 0.5);
  EXPECT_LT(std::min(t.hue, 180.0 - t.hue), 3.0) << t.hue;  // red: hue 0, across the circle's seam
  EXPECT_NEAR(t.object_fraction, M_PI * 49 / (kW * kH), 0.004);
  EXPECT_GT(t.hue_histogram[0] + t.hue_histogram[179], 0);
  const auto blue = detect_object_track(disc_clip(kBlue, 80, 100, 0, -2));
  ASSERT_TRUE(blue.present);
  EXPECT_NEAR(blue.hue, 118.0, 4.0);  // OpenCV's hue of (40, 60, 230)
  EXPECT_NEAR(blue.dy, -18.0, 0.5);
  // Float frames in [0, 1] are the same clip.
  Clip as_float;
  for (const auto& f : disc_clip(kRed, 30, 60, 3, 0)) {
    cv::Mat g;
    f.convertTo(g, CV_32FC3, 1 / 255.0);
    as_float.push_back(g);
  }
  const auto tf = detect_object_track(as_float);
  EXPECT_EQ(tf.hue_histogram, t.hue_histogram);
  EXPECT_DOUBLE_EQ(tf.dx, t.dx);
  // A grey clip has no object: the background's noise is far below the saturation bound.
  const auto none = detect_object_track(disc_clip(kRed, 30, 60, 3, 0, 0));
  EXPECT_FALSE(none.present);
  EXPECT_TRUE(none.frames.empty());
  EXPECT_EQ(none.hue, -1);
  EXPECT_EQ(to_json(none)["present"], false);
}

TEST(ObjectTrack, LostSemanticsNamesWhatTheCandidateLost) {
  const auto base = detect_object_track(disc_clip(kRed, 30, 60, 3, 0));
  auto lost = [&](const Clip& c) { return lost_semantics(detect_object_track(c), base); };
  // The same scene on other noise, or moving a little slower (2.5 of 3 px a frame): nothing lost.
  EXPECT_TRUE(lost(disc_clip(kRed, 30, 60, 3, 0, 7, 99)).empty());
  EXPECT_TRUE(lost(disc_clip(kRed, 31, 61, 2.5, 0.3)).empty());
  // Stopped, reversed, turned to move down, or under half the travel: the motion is lost.
  for (const auto& [vx, vy] : {std::pair{0.0, 0.0}, {-3.0, 0.0}, {0.0, 3.0}, {1.2, 0.0}}) {
    const auto r = lost(disc_clip(kRed, 60, 60, vx, vy));
    ASSERT_EQ(r.size(), 1u) << vx << "," << vy;
    EXPECT_NE(r[0].find("object motion lost"), std::string::npos) << r[0];
  }
  // Another colour on the same path.
  auto r = lost(disc_clip(kBlue, 30, 60, 3, 0));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("object colour changed"), std::string::npos) << r[0];
  // No object at all.
  r = lost(disc_clip(kRed, 30, 60, 3, 0, 0));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("object lost"), std::string::npos) << r[0];
  // A baseline whose saturated pixels cover 60% of the frame shows no single object: nothing to judge.
  Clip wall = disc_clip(kRed, 30, 100, 3, 0);
  for (auto& fr : wall) cv::rectangle(fr, cv::Rect(0, 0, kW, kH * 3 / 5), cv::Scalar(40, 200, 60), cv::FILLED);
  const auto wall_track = detect_object_track(wall);
  ASSERT_TRUE(wall_track.present);
  EXPECT_GT(wall_track.object_fraction, 0.5);
  EXPECT_FALSE(single_object(wall_track));
  EXPECT_TRUE(single_object(base));
  EXPECT_TRUE(lost_semantics(detect_object_track(disc_clip(kRed, 30, 60, 3, 0, 0)), wall_track).empty());
  // A baseline without an object, or one that does not move, has nothing to lose there.
  EXPECT_TRUE(lost_semantics(base, detect_object_track(disc_clip(kRed, 30, 60, 3, 0, 0))).empty());
  EXPECT_TRUE(lost_semantics(detect_object_track(disc_clip(kRed, 60, 60, 0, 0)),
                             detect_object_track(disc_clip(kRed, 60, 60, 0.2, 0)))
                  .empty());
}
