#pragma once
// The options of the rope_cache technique (rope_cache.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The rope_cache technique's options (rope_cache.cpp), read as RuntimeOptions::of<RopeCacheOptions>().
struct RopeCacheOptions {
  bool on = false;  // rotary tables kept on the device per latent grid
};

}  // namespace autooptim::runtime
