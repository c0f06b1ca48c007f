#pragma once
// The options of the vae_causal_buffer technique (vae_causal_buffer.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_causal_buffer technique's options (vae_causal_buffer.cpp), read as
// RuntimeOptions::of<VaeCausalBufferOptions>().
struct VaeCausalBufferOptions {
  bool on = false;  // causal convs keep [context, chunk] in one buffer: no concatenation
};

}  // namespace autooptim::runtime
