#pragma once
// The options of the uniform_timestep technique (uniform_timestep.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The uniform_timestep technique's options (uniform_timestep.cpp), read as
// RuntimeOptions::of<UniformTimestepOptions>().
struct UniformTimestepOptions {
  bool on = false;  // a per-token timestep with one value per sample handled per sample
};

}  // namespace autooptim::runtime
