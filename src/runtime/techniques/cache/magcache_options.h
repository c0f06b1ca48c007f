#pragma once
// The options of the magcache technique (magcache.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>
#include <vector>

namespace autooptim::runtime {

// MagCache-style block cache: a magnitude-ratio schedule (|residual_t| / |residual_t-1| per step, per
// branch), calibrated once; skipping accumulates the error |1 - product of ratios| and stops at the
// threshold or after max_skips consecutive skips.
struct MagCacheOptions {
  bool enabled = false;
  double threshold = 0.12;
  int64_t max_skips = 2;
  int64_t warmup_steps = 10;
  bool dense_last_step = true;
  std::vector<double> ratios;         // conditional branch, one per calibrated step
  std::vector<double> ratios_uncond;  // unconditional branch (empty: the conditional schedule)
  bool calibrate = false;             // compute every step and record the ratios
};

}  // namespace autooptim::runtime
