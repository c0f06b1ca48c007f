#pragma once
// The options of the hopper_attention technique (hopper_attention.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The hopper_attention technique's options (hopper_attention.cpp), read as
// RuntimeOptions::of<HopperAttentionOptions>().
struct HopperAttentionOptions {
  int64_t variant = 0;  // our sm_90a attention kernel for head_dim 128 (0: off; 1-6: its variant)
};

}  // namespace autooptim::runtime
