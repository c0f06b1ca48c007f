#pragma once
// The options of the fp8 technique (fp8_linear.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// Quantisation family (lossy: judged by the quality gate like a cache).
struct QuantOptions {
  bool fp8 = false;  // FP8 e4m3 GEMMs for the transformer's large linears (GPU builds, sm_89+)
};

}  // namespace autooptim::runtime
