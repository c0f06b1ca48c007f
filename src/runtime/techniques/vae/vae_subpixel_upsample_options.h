#pragma once
// The options of the vae_subpixel_upsample technique (vae_subpixel_upsample.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_subpixel_upsample technique's options (vae_subpixel_upsample.cpp), read as
// RuntimeOptions::of<VaeSubpixelUpsampleOptions>().
struct VaeSubpixelUpsampleOptions {
  bool on = false;  // nearest 2x + 3x3 conv as four 2x2 convs on the small frame
};

}  // namespace autooptim::runtime
