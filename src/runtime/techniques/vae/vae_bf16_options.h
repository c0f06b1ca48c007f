#pragma once
// The options of the vae_bf16 technique (vae_bf16.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_bf16 technique's options (vae_bf16.cpp), read as RuntimeOptions::of<VaeBf16Options>().
struct VaeBf16Options {
  bool on = false;  // decode with a bf16 copy of the VAE (statistics stay float32)
};

}  // namespace autooptim::runtime
