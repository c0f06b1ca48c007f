#pragma once
// The options of the vae_chunk_frames technique (vae_chunk_frames.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_chunk_frames technique's options (vae_chunk_frames.cpp), read as RuntimeOptions::of<VaeChunkFramesOptions>().
struct VaeChunkFramesOptions {
  int64_t frames = 1;  // latent frames per decoder chunk after the first (the reference: 1)
};

}  // namespace autooptim::runtime
