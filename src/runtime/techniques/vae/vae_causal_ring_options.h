#pragma once
// The options of the vae_causal_ring technique (vae_causal_ring.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_causal_ring technique's options (vae_causal_ring.cpp), read as RuntimeOptions::of<VaeCausalRingOptions>().
struct VaeCausalRingOptions {
  int64_t chunks = 0;  // chunks the causal buffer holds (0: one, the context copied each chunk)
};

}  // namespace autooptim::runtime
