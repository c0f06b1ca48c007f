#pragma once
// The options of the vae_fused_shortcut technique (vae_fused_shortcut.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The vae_fused_shortcut technique's options (vae_fused_shortcut.cpp), read as
// RuntimeOptions::of<VaeFusedShortcutOptions>().
struct VaeFusedShortcutOptions {
  bool on = false;  // the up blocks' DupUp3D shortcut added in place in one CUDA pass
};

}  // namespace autooptim::runtime
