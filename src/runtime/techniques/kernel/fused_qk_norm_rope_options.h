#pragma once
// The options of the fused_qk_norm_rope technique (fused_qk_norm_rope.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The fused_qk_norm_rope technique's options (fused_qk_norm_rope.cpp), read as
// RuntimeOptions::of<FusedQkNormRopeOptions>().
struct FusedQkNormRopeOptions {
  bool on = false;  // q/k RMSNorm + RoPE in one in-place CUDA pass
};

}  // namespace autooptim::runtime
