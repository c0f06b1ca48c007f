#pragma once
// The baseline's runs of a worker's trials, kept per (baseline manifest, prompt, seed) where they are reused:
// every trial of every executor holds its candidate against the same baseline clip of a prompt, which the
// worker's first trial on it made, so later trials run only the candidate (docs/gate-cost.md). Reused by
// default on a CUDA device, a machine of its own; made fresh on a CPU, whose load from other processes moves
// within minutes, so a time measured earlier is no reference there.
#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>

#include "gates/manifest.h"
#include "gates/prompts.h"

namespace autooptim::workers {

struct TrialBaselineRun {
  at::Tensor video8;  // [T, 3, H, W] uint8: what the trial's PSNR compares (8-bit)
  double seconds = 0;
};

class TrialBaselines {
 public:
  explicit TrialBaselines(bool reuse) : reuse_(reuse) {}
  bool reuse() const { return reuse_; }
  // The kept run of `base` on `prompt` at its configuration's seed, where runs are reused and one is kept.
  std::optional<TrialBaselineRun> find(const gates::Manifest& base, const gates::Prompt& prompt) const;
  // Keeps a fresh run (where runs are reused): its clip in 8 bits, [T, 3, H, W] in [0, 1] given.
  void keep(const gates::Manifest& base, const gates::Prompt& prompt, const at::Tensor& video, double seconds);
  // The kept clip as [0, 1] floats.
  static at::Tensor video(const TrialBaselineRun& run);

 private:
  bool reuse_;
  std::map<std::string, TrialBaselineRun> runs_;
};

// mode: "auto" (reused on a CUDA device), "reuse" or "fresh".
bool reuse_trial_baselines(const std::string& mode, const at::Device& device);

}  // namespace autooptim::workers
