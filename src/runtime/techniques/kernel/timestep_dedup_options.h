#pragma once
// The options of the timestep_dedup technique (timestep_dedup.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The timestep_dedup technique's options (timestep_dedup.cpp), read as RuntimeOptions::of<TimestepDedupOptions>().
struct TimestepDedupOptions {
  bool on = false;  // time embedding computed once per distinct timestep value
};

}  // namespace autooptim::runtime
