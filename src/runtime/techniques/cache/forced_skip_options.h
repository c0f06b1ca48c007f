#pragma once
// The options of the forced_skip technique (forced_skip.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>
#include <vector>

namespace autooptim::runtime {

// A forced skip schedule, for benchmarking the speed of a cache at a given skip ratio: at the listed
// steps every branch reuses its last residual instead of running the transformer.
struct ForcedSkipOptions {
  std::vector<int64_t> steps;
};

}  // namespace autooptim::runtime
