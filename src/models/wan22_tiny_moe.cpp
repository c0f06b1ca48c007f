#include "models/architecture_parts.h"
#include "models/wan22_models.h"

namespace autooptim::models {
namespace {

// The A14B structure at a tiny size, for the CPU: two experts of wan22-tiny's transformer width (4 layers
// of 4 heads x 24, 16 latent channels), the Wan2.1 VAE's plain structure (8x spatial, 4x temporal, no
// patchify) at 4 base channels, and wan22-tiny's 2-layer UMT5 over the embedded vocabulary. Synthetic
// weights only (--synthetic-weights), conditioned to be smooth as wan22-tiny's are.
Architecture tiny_moe_architecture() {
  return Architecture{tiny_transformer(), wan21_vae(4, 1, tiny_latents_mean(), tiny_latents_std()),
                      tiny_text_encoder()};
}

}  // namespace

ModelFacts wan22_tiny_moe() {
  ModelFacts m;
  m.name = "wan22-tiny-moe";
  m.embedded = false;
  m.architecture = tiny_moe_architecture();
  m.tokenizer = TokenizerSource::kEmbedded;
  m.smooth_synthetic = true;
  m.trainable = false;
  m.wants_gpu = false;
  m.pipeline = {false, 0.875, false};  // T2V-A14B's switch
  m.pixel_multiple = 16;
  // 80x48: the 8x VAE gives wan22-tiny's 6x10 latents (its token count and cost per forward); the A14B
  // checkpoints' own two guidance scales (4.0 for the high-noise expert, 3.0 for the low-noise one).
  m.official = {48, 80, 49, 16, 50, 4.0, 42, 5.0, 3.0};
  m.gate = {0.05, 0.0, false};
  // As wan22-tiny's: a run fits a 2-core CI machine in minutes.
  m.run = {6.0, 10, 5, 2, 2, 0.0};
  return m;
}

}  // namespace autooptim::models
