#pragma once
// The options of the vae_pointwise_gemm technique (vae_pointwise_gemm.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_pointwise_gemm technique's options (vae_pointwise_gemm.cpp), read as
// RuntimeOptions::of<VaePointwiseGemmOptions>().
struct VaePointwiseGemmOptions {
  bool on = false;  // 1x1x1 convs as one GEMM over the voxels (channels-last view)
};

}  // namespace autooptim::runtime
