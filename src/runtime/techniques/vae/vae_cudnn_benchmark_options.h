#pragma once
// The options of the vae_cudnn_benchmark technique (vae_cudnn_benchmark.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_cudnn_benchmark technique's options (vae_cudnn_benchmark.cpp), read as
// RuntimeOptions::of<VaeCudnnBenchmarkOptions>().
struct VaeCudnnBenchmarkOptions {
  bool on = false;  // cuDNN times its conv algorithms per shape during the decode
};

}  // namespace autooptim::runtime
