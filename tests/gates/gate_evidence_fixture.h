#pragma once
// Gate evidence made in the test, no model run: an honest candidate on a one-prompt split with one timed
// pair, 2x faster than the baseline, every counter consistent with the work it did. Each check's test
// starts from it and breaks one fact.
#include <gtest/gtest.h>
#include <opencv2/core.hpp>

#include <string>

#include <vector>

#include "gates/gate.h"
#include "gates/gate_evidence.h"
#include "runtime/video_io.h"

// The message holds this part.
#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

namespace autooptim::test {

constexpr int64_t kLayers = 2, kTextLength = 8;

// Three 32x32 frames of seeded noise in [lo, hi] (no saturation, no black, no blocks).
inline std::vector<cv::Mat> noise_frames(int seed, int lo = 20, int hi = 230) {
  cv::RNG rng(static_cast<uint64_t>(seed));
  std::vector<cv::Mat> frames;
  for (int t = 0; t < 3; ++t) {
    cv::Mat f(32, 32, CV_8UC3);
    rng.fill(f, cv::RNG::UNIFORM, cv::Scalar::all(lo), cv::Scalar::all(hi + 1));
    frames.push_back(f);
  }
  return frames;
}

inline std::vector<cv::Mat> copy_frames(const std::vector<cv::Mat>& frames) {
  std::vector<cv::Mat> out;
  for (const auto& f : frames) out.push_back(f.clone());
  return out;
}

inline at::Tensor video_of(const std::vector<cv::Mat>& frames) { return runtime::tensor_from_frames(frames); }

// A run of `m`'s config that did all its work: every step both branches and every block, no sparse path.
inline gates::RunOutput honest_run(const gates::Manifest& m, const std::vector<cv::Mat>& frames, double seconds) {
  gates::RunOutput r;
  r.video = video_of(frames);
  r.seconds = seconds;
  r.prompt.id = "p0";
  r.seed = 7;
  const int64_t branches = m.config.guidance > 1.0 ? 2 : 1;
  r.trace.add("transformer.forwards", static_cast<double>(m.config.steps * branches));
  r.times.text_encoding = 0.1;
  r.times.decoding = 0.2;
  r.times.denoising = seconds - 0.3;
  r.times.text_tokens = branches * kTextLength;
  for (int64_t s = 0; s < m.config.steps; ++s) {
    r.times.step_seconds.push_back(r.times.denoising / static_cast<double>(m.config.steps));
    r.times.step_forwards.push_back(branches);
    r.times.step_blocks.push_back(branches * kLayers);
    r.times.step_sparse_attention.push_back(0);
  }
  return r;
}

inline gates::GateClip clip_of(std::string name, bool pair, gates::RunOutput run, std::vector<cv::Mat> base8) {
  gates::GateClip c;
  c.name = std::move(name);
  c.pair = pair;
  c.run = std::move(run);
  c.cand8 = runtime::frames_from_tensor(c.run.video);
  c.base8 = std::move(base8);
  c.identical = false;
  if (c.cand8.size() == c.base8.size()) {
    c.identical = true;
    for (size_t i = 0; i < c.cand8.size(); ++i)
      if (c.cand8[i].size() != c.base8[i].size() || cv::norm(c.cand8[i], c.base8[i], cv::NORM_INF) != 0)
        c.identical = false;
  }
  return c;
}

// The honest evidence of candidate `m` (a lossless one: its clips are the baseline's bit for bit).
inline gates::GateEvidence honest_evidence(const gates::Manifest& m) {
  gates::GateEvidence ev;
  gates::Prompt p;
  p.id = "p0";
  ev.prompts = {p};
  const auto base8 = noise_frames(1);
  ev.clips.push_back(clip_of("p0", false, honest_run(m, base8, 1.0), copy_frames(base8)));
  ev.clips.push_back(clip_of("pair0:p0@7", true, honest_run(m, base8, 1.0), copy_frames(base8)));
  ev.audit = honest_run(m, base8, 1.0);
  ev.off_run = honest_run(m, base8, 2.0);
  ev.off_manifest = gates::to_json(gates::with_flags_off(m));
  auto& t = ev.timing;
  t.baseline = runtime::TimingStats::of({2.0, 2.02, 1.98});
  t.candidate = runtime::TimingStats::of({1.0, 1.01, 0.99});
  t.speedup = 2.0;
  t.noise = 0.02;
  t.margin = 0.03;
  t.candidate_split_s = {1.0};
  t.baseline_denoise_s = 1.7;
  t.baseline_text_s = t.candidate_text_s = 0.1;
  t.baseline_decode_s = t.candidate_decode_s = 0.2;
  ev.work.base_linear = ev.work.candidate_linear = 1e6;
  ev.work.base_attention = 1e5;
  ev.work.base_forwards = 100;
  ev.work.num_layers = kLayers;
  ev.work.max_text_length = kTextLength;
  ev.calibration.matmul_tflops = ev.calibration.attention_tflops = 1.0;
  ev.calibration.tokens = 64;
  ev.peak_tflops = 1.0;
  ev.control_dtype = "fp64";
  return ev;
}

// The harness's baseline of the tiny model: a candidate with no technique flags, at the official config.
inline gates::Manifest tiny_baseline() { return gates::pinned_baseline("wan22-tiny"); }

}  // namespace autooptim::test
