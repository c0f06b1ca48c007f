#pragma once
// The options of the vae_transposed_upsample technique (vae_transposed_upsample.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_transposed_upsample technique's options (vae_transposed_upsample.cpp), read as
// RuntimeOptions::of<VaeTransposedUpsampleOptions>().
struct VaeTransposedUpsampleOptions {
  bool on = false;  // nearest 2x + 3x3 conv as one stride-2 4x4 transposed conv
};

}  // namespace autooptim::runtime
