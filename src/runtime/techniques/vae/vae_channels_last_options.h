#pragma once
// The options of the vae_channels_last technique (vae_channels_last.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_channels_last technique's options (vae_channels_last.cpp), read as
// RuntimeOptions::of<VaeChannelsLastOptions>().
struct VaeChannelsLastOptions {
  bool on = false;  // decode in channels_last_3d (NDHWC), the layout cuDNN's convs want
};

}  // namespace autooptim::runtime
