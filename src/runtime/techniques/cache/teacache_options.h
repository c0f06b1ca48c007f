#pragma once
// The options of the teacache technique (teacache.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>
#include <vector>

namespace autooptim::runtime {

// TeaCache-style block cache: the first block's modulated input changes by a relative L1 amount each
// step; a fitted polynomial rescales it into an estimate of the output's change; while the accumulated
// estimate stays under the threshold the block stack is skipped (its cached residual reused). Per CFG
// branch.
struct TeaCacheOptions {
  bool enabled = false;
  double threshold = 0.1;
  int64_t warmup_steps = 5;
  bool dense_last_step = true;
  // Polynomial, lowest order first: estimate = c0 + c1 x + c2 x^2 ...; [0, 1] is the identity (uncalibrated).
  std::vector<double> coefficients{0.0, 1.0};
  bool calibrate = false;  // compute every step and record (input change, output change) pairs
};

}  // namespace autooptim::runtime
