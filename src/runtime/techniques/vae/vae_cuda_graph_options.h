#pragma once
// The options of the vae_cuda_graph technique (vae_cuda_graph.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_cuda_graph technique's options (vae_cuda_graph.cpp), read as RuntimeOptions::of<VaeCudaGraphOptions>().
struct VaeCudaGraphOptions {
  bool on = false;  // steady decoder chunks captured once per chunk length, then replayed
};

}  // namespace autooptim::runtime
