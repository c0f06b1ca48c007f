#pragma once
// What autooptim knows about one model, in one value: its name, where its architecture comes from, how
// it runs by default, its gate defaults and its prompt pin. Code that needs a fact about a model asks
// the table (models/model_table.h) for it rather than comparing the model's name. Torch-free: the
// runtime turns the architecture into its config classes, the contract and the apps read the rest.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace autooptim::models {

// The model's official generation setting: a manifest's "config" for it. A run off it can be measured
// but never win a tier.
struct OfficialRun {
  int64_t height = 0;
  int64_t width = 0;
  int64_t frames = 0;
  double fps = 0;
  int64_t steps = 0;
  double guidance = 0;
  int64_t seed = 0;
  double flow_shift = 0;
  std::optional<double> guidance_2;  // the second expert's guidance scale (two-expert models only)
};

// How its pipeline feeds the transformer (the diffusers model_index.json's keys, where a checkpoint's
// own model_index.json does not say).
struct PipelineFacts {
  // TI2V-5B: one timestep per token, the image's latent on frame 0. A14B: one per sample.
  bool expand_timesteps = true;
  // Two experts (transformer, transformer_2): the first runs t >= boundary_ratio x 1000.
  std::optional<double> boundary_ratio;
  // An image-to-video model (its transformer takes the image's channels): every generation needs an image.
  bool needs_image = false;
};

// An architecture written as the diffusers checkpoint's config.json values of each component (keys
// left out take the runtime config classes' defaults).
struct Architecture {
  nlohmann::json transformer;
  nlohmann::json vae;
  nlohmann::json text_encoder;
};

// Where the model's SentencePiece tokenizer comes from when it runs on its own weights (any model run
// on synthetic weights uses the embedded one).
enum class TokenizerSource {
  kEmbedded,    // the 512-piece vocabulary compiled into the binary (runtime/models.h)
  kCheckpoint,  // the checkpoint folder's tokenizer/spiece.model
};

// A model's own prompt set: the folder (relative to the data folders) and the SHA-256 its held-out file
// is pinned to. load_prompts holds a folder of that name to the pin.
struct PromptPin {
  std::string dir;             // "prompts/wan22-tiny"
  std::string heldout_sha256;  // of <dir>/heldout.jsonl
};

// The gate's defaults where its settings leave them to the model (GateSettings' -1 values).
struct GateDefaults {
  // The baseline's least efficiency against its calibration (docs/gate-defences.md), by device.
  double min_baseline_efficiency_cpu = 0;
  double min_baseline_efficiency_cuda = 0;
  // Whether the visual check compares the object the baseline shows (prompts that are scenes of one object).
  bool object_check = false;
};

// `autooptim run`'s defaults for the model, where the command line does not say otherwise.
struct RunDefaults {
  double budget_minutes = 0;
  int64_t budget_trials = 0;
  int64_t executor_trials = 0;
  int64_t max_prompts = 0;     // prompts per split (0: all)
  int64_t timing_repeats = 0;  // interleaved timed pairs per gate run
  // Unset: the orchestrator's own rule (the smallest tier at the official configuration, 0 at a reduced one).
  std::optional<double> screen_min_speedup;
};

struct ModelFacts {
  std::string name;
  // The small model autooptim carries inside the binary: it runs without a checkpoint, on deterministic
  // synthetic weights made at start-up (conditioned to be smooth, runtime/models.cpp), with the embedded
  // tokenizer; it ships trained weights and its own prompt set, and `autooptim train` trains it.
  bool embedded = false;
  // The architecture compiled in; unset: the runtime config classes' full-size presets
  // (WanTransformerConfig::ti2v_5b() and siblings), which are the diffusers checkpoint's values.
  std::optional<Architecture> architecture;
  TokenizerSource tokenizer = TokenizerSource::kCheckpoint;
  // Synthetic weights conditioned to be smooth (a near-identity transformer, runtime/models.cpp), as the
  // tiny models want: random ones make a chaotic denoiser whose clips no technique can match.
  bool smooth_synthetic = false;
  std::string shipped_weights_dir;       // trained weights found like prompts/ ("" when none ship)
  std::optional<PromptPin> own_prompts;  // the trained model gates on these instead of the harness's
  bool trainable = false;                // `autooptim train` can train it
  // Meant for a GPU: --device auto refuses to fall back to the CPU (hours per clip).
  bool wants_gpu = false;
  PipelineFacts pipeline;
  // Height and width are multiples of this: the VAE's spatial factor times the patch (32 for TI2V-5B's
  // 16x VAE, 16 for the Wan2.1 VAE's 8x).
  int64_t pixel_multiple = 32;
  OfficialRun official;
  GateDefaults gate;
  RunDefaults run;
};

}  // namespace autooptim::models
