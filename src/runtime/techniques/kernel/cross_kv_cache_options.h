#pragma once
// The options of the cross_kv_cache technique (cross_kv_cache.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The cross_kv_cache technique's options (cross_kv_cache.cpp), read as RuntimeOptions::of<CrossKvCacheOptions>().
struct CrossKvCacheOptions {
  bool on = false;  // cross-attention K/V computed once per prompt, reused across steps
};

}  // namespace autooptim::runtime
