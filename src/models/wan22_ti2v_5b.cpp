#include "models/wan22_models.h"

namespace autooptim::models {

ModelFacts wan22_ti2v_5b() {
  ModelFacts m;
  m.name = "wan22-ti2v-5b";
  m.embedded = false;
  m.architecture = std::nullopt;  // the diffusers checkpoint's (the runtime's full-size presets)
  m.tokenizer = TokenizerSource::kCheckpoint;
  m.trainable = false;
  m.wants_gpu = true;
  m.official = {704, 1280, 121, 24, 50, 5.0, 42, 5.0};
  // Well below what an honest baseline reaches: the 5B forward on an H200 reaches more than half the
  // matmul peak (docs/gate-defences.md). The harness's prompts are not scenes of one object.
  m.gate = {0.05, 0.25, false};
  m.run = {60.0, 40, 8, 0, 3, std::nullopt};
  return m;
}

}  // namespace autooptim::models
