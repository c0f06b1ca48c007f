#pragma once
// The options of the taylorseer technique (taylorseer.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// TaylorSeer-style fixed schedule: after the warm-up a full forward every `interval` steps, and in between
// each CFG branch forecasts its residual (output - input) from its last full computations by a Taylor
// series in the step index (Liu et al., ICCV 2025). It skips the same steps on any model.
struct TaylorSeerOptions {
  bool enabled = false;
  int64_t interval = 3;      // a full computation every `interval` steps after the warm-up
  int64_t order = 1;         // 0: reuse the last residual; 1: linear from the last two; 2: quadratic from three
  int64_t warmup_steps = 5;  // first steps always computed in full
  bool dense_last_step = true;
};

}  // namespace autooptim::runtime
