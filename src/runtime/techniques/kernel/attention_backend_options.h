#pragma once
// The options of the attention_backend technique (attention_backend.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>
#include <string>

namespace autooptim::runtime {

// The attention_backend technique's options (attention_backend.cpp), read as
// RuntimeOptions::of<AttentionBackendOptions>().
struct AttentionBackendOptions {
  std::string backend = "auto";  // auto | math | flash | efficient | cudnn (what the build has)
};

}  // namespace autooptim::runtime
