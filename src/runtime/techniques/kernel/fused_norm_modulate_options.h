#pragma once
// The options of the fused_norm_modulate technique (fused_norm_modulate.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The fused_norm_modulate technique's options (fused_norm_modulate.cpp), read as
// RuntimeOptions::of<FusedNormModulateOptions>().
struct FusedNormModulateOptions {
  bool on = false;  // LayerNorm + adaLN shift/scale in one CUDA pass
};

}  // namespace autooptim::runtime
