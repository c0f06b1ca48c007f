#pragma once
// The options of the fused_gate_residual technique (fused_gate_residual.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The fused_gate_residual technique's options (fused_gate_residual.cpp), read as
// RuntimeOptions::of<FusedGateResidualOptions>().
struct FusedGateResidualOptions {
  bool on = false;  // gate multiply + residual add in one CUDA pass
};

}  // namespace autooptim::runtime
