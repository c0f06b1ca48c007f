#pragma once
// The options of the fused_qkv technique (fused_qkv.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The fused_qkv technique's options (fused_qkv.cpp), read as RuntimeOptions::of<FusedQkvOptions>().
struct FusedQkvOptions {
  bool on = false;  // q/k/v weights merged at load into one GEMM
};

}  // namespace autooptim::runtime
