#pragma once
// The options of the gemm_autotune technique (gemm_autotune.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The gemm_autotune technique's options (gemm_autotune.cpp), read as RuntimeOptions::of<GemmAutotuneOptions>().
struct GemmAutotuneOptions {
  bool on = false;  // the fastest of cuBLASLt's candidate algorithms per GEMM shape
};

}  // namespace autooptim::runtime
