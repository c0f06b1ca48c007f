#pragma once
// The options of the vae_frame_convs technique (vae_frame_convs.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_frame_convs technique's options (vae_frame_convs.cpp), read as RuntimeOptions::of<VaeFrameConvsOptions>().
struct VaeFrameConvsOptions {
  bool on = false;  // one-frame convs as 2D convs over the frames (channels-last view)
};

}  // namespace autooptim::runtime
