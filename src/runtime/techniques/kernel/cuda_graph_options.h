#pragma once
// The options of the cuda_graph technique (cuda_graph.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The cuda_graph technique's options (cuda_graph.cpp), read as RuntimeOptions::of<CudaGraphOptions>().
struct CudaGraphOptions {
  bool on = false;  // transformer forward captured and replayed (GPU builds)
};

}  // namespace autooptim::runtime
