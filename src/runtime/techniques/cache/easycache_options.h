#pragma once
// The options of the easycache technique (easycache.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

struct EasyCacheOptions {
  bool enabled = false;
  double threshold = 0.05;    // accumulated relative-change budget before a full forward (0, 1]
  int64_t warmup_steps = 10;  // first steps always computed in full
  bool dense_last_step = true;
  // 0: a skipped step reuses the branch's last residual; 1: extrapolates it linearly from the branch's
  // last two full computations (TaylorSeer's first-order forecast, Liu et al. 2025).
  int64_t order = 0;
};

}  // namespace autooptim::runtime
