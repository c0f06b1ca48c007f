#pragma once
// The options of the vae_head_pad technique (vae_head_pad.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_head_pad technique's options (vae_head_pad.cpp), read as RuntimeOptions::of<VaeHeadPadOptions>().
struct VaeHeadPadOptions {
  int64_t channels = 0;  // output channels the decoder's last conv is padded to (0: off)
};

}  // namespace autooptim::runtime
