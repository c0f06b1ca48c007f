#pragma once
// What the GPU tests of the tiny model share: the model in bf16 on the first GPU, and a short
// text-to-video clip (64x96, 9 frames).
#include <cstdint>

#include "runtime/models.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::test {

inline runtime::LoadedModel tiny_bf16_on_gpu() {
  runtime::LoadRequest r;
  r.precision = runtime::Precision{at::kBFloat16, at::Device(at::kCUDA, 0)};
  return runtime::load_model(r);
}

inline runtime::GenerateParams small_clip(int64_t steps) {
  runtime::GenerateParams p;
  p.prompt = "a red fox";
  p.height = 64;
  p.width = 96;
  p.frames = 9;
  p.steps = steps;
  return p;
}

}  // namespace autooptim::test
