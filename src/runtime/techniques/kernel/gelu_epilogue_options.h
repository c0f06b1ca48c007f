#pragma once
// The options of the gelu_epilogue technique (gelu_epilogue.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The gelu_epilogue technique's options (gelu_epilogue.cpp), read as RuntimeOptions::of<GeluEpilogueOptions>().
struct GeluEpilogueOptions {
  bool on = false;  // FFN GELU-tanh in the GEMM's cuBLASLt epilogue
};

}  // namespace autooptim::runtime
