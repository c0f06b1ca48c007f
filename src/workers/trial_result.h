#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace autooptim::workers {

// One measured trial, as a worker answers an executor's trial request: the candidate's flags, the
// prompts it ran on, its speedup and quality. Read strictly (a missing or mistyped key is an Error naming it).
struct TrialResult {
  nlohmann::json flags;
  std::string label;
  int64_t prompts = 0;
  double baseline_s = 0, candidate_s = 0, speedup = 0, psnr_min = 0;
  double ssim_min = 0;  // the worst prompt's mean SSIM against the baseline's clip
  // Measured on the candidate runs (mean over prompts), -1 where not counted: the cache family's
  // forward-skip ratio (cache.skip_ratio) and the achieved attention density (sparse.attention.density).
  double skip_ratio = -1, density = -1;
  // What the harness's authenticity check would say of the candidate runs' engagement counters
  // (a switch that did nothing): such a trial is logged but never proposed.
  std::vector<std::string> not_engaged;
  // Prompts whose baseline run was the worker's kept one (workers/trial_baselines.h), not made for this trial.
  int64_t baselines_reused = 0;
  bool engaged() const { return not_engaged.empty(); }
  nlohmann::json to_json() const;
  static TrialResult from_json(const nlohmann::json& j);
};

}  // namespace autooptim::workers
