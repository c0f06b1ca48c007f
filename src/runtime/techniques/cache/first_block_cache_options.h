#pragma once
// The options of the first_block_cache technique (first_block_cache.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// First-block cache: block 0 always runs; when its residual changed by less than the threshold (relative
// L1 against the last full computation of the branch), blocks 1..N-1 reuse their cached residual.
struct FirstBlockCacheOptions {
  bool enabled = false;
  double threshold = 0.05;
  int64_t warmup_steps = 1;
  bool dense_last_step = true;
};

}  // namespace autooptim::runtime
