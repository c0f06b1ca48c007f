#pragma once
// A manifest's resolved configuration as the pipeline's generation parameters: one conversion for the
// worker, the executors' trial runner and `generate --manifest`. Header-only so that gates_core
// (manifests, no torch) stays free of the runtime.
#include <string>

#include "gates/manifest.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::gates {

inline runtime::GenerateParams generate_params(const RunConfig& c, const std::string& prompt) {
  runtime::GenerateParams p;
  p.prompt = prompt;
  p.height = c.height;
  p.width = c.width;
  p.frames = c.frames;
  p.steps = c.steps;
  p.guidance = c.guidance;
  p.guidance_2 = c.guidance_2;
  p.seed = c.seed;
  p.fps = c.fps;
  return p;
}

}  // namespace autooptim::gates
