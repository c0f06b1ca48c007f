#pragma once
// The options of the fused_cross_norm technique (fused_cross_norm.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The fused_cross_norm technique's options (fused_cross_norm.cpp), read as RuntimeOptions::of<FusedCrossNormOptions>().
struct FusedCrossNormOptions {
  bool on = false;  // norm2 and the cross residual add + FFN norm/modulation in CUDA passes
};

}  // namespace autooptim::runtime
