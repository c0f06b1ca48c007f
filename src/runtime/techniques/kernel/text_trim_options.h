#pragma once
// The options of the text_trim technique (text_trim.cpp), held in RuntimeOptions by type (RuntimeOptions::of).
// Torch-free: the registry library binds its flags to them.
#include <cstdint>

namespace autooptim::runtime {

// The text_trim technique's options (text_trim.cpp), read as RuntimeOptions::of<TextTrimOptions>().
struct TextTrimOptions {
  bool on = false;  // the text encoder runs over the prompt's own tokens, not all 512
};

}  // namespace autooptim::runtime
