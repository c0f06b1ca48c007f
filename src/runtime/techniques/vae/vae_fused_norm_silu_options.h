#pragma once
// The options of the vae_fused_norm_silu technique (vae_fused_norm_silu.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_fused_norm_silu technique's options (vae_fused_norm_silu.cpp), read as
// RuntimeOptions::of<VaeFusedNormSiluOptions>().
struct VaeFusedNormSiluOptions {
  bool on = false;  // RMS norm + SiLU in one CUDA pass, written into the conv's input
};

}  // namespace autooptim::runtime
