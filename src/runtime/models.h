#pragma once
// The models autooptim knows: the real Wan2.2-TI2V-5B from a diffusers checkpoint folder (or with
// synthetic weights of the real shapes), and wan22-tiny, the same architecture at a tiny size with
// deterministic synthetic weights made at start-up and an embedded tokenizer.
#include <memory>
#include <string>
#include <vector>

#include "models/model_table.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::runtime {

struct ModelConfigs {
  WanTransformerConfig transformer;  // both experts' where the pipeline has two (same architecture)
  WanVAEConfig vae;
  UMT5Config text_encoder;
  UniPCConfig scheduler;
  PipelineSpec pipeline;  // expand_timesteps, and the second expert's boundary_ratio
};

struct LoadRequest {
  std::string model = models::kDefaultModel;  // a name of the model table (models/model_table.h)
  // Diffusers checkpoint folder: wan22-ti2v-5b's, or a trained wan22-tiny (autooptim train, the shipped
  // assets/wan22-tiny/weights). Empty for wan22-tiny: its synthetic weights (the command line resolves
  // the shipped trained weights as the default, see apps/autooptim/model_args.cpp).
  std::string weights_dir;
  bool synthetic_weights = false;  // without a checkpoint: deterministic random weights
  Precision precision;             // device and compute dtype of the transformer
  RuntimeOptions options;
};

struct LoadedModel {
  std::string name;
  std::unique_ptr<WanPipeline> pipeline;
  double load_seconds = 0;
  std::string weights_label;  // where the weights came from ("synthetic", a folder)
};

// The model table's names (models/model_table.h).
std::vector<std::string> known_models();

// The transformer's compute dtype for a manifest dtype on a device: bf16/fp32/fp64 on GPUs; the CPU
// has no fast bf16, so it runs bf16 manifests in fp32 (and fp64 ones in fp64).
at::ScalarType compute_dtype(const std::string& dtype, const at::Device& device);
// A model's configs: its architecture from the model table, or the full-size presets where the table
// leaves it to them. The scheduler's config is the default one.
ModelConfigs configs_of(const models::ModelFacts& facts);
ModelConfigs tiny_configs();  // the embedded model's
ModelConfigs ti2v_5b_configs();

// Reads and checks a diffusers checkpoint folder: model_index.json, transformer/ (and transformer_2/ where
// model_index.json has one: the A14B experts), vae/, text_encoder/, tokenizer/spiece.model,
// scheduler/scheduler_config.json. Every missing part is named in one error. model_index.json's
// boundary_ratio and expand_timesteps (true where it does not say: TI2V-5B's) set the pipeline spec.
ModelConfigs read_checkpoint_configs(const std::string& dir);

LoadedModel load_model(const LoadRequest& req);

// Fills every parameter of `m` with deterministic random values: each tensor seeded from its name, so
// the same name gets the same values on every device and build. Weights ~ N(0, 1/fan_in) (scaled),
// biases small, norm gains near 1.
void fill_synthetic(torch::nn::Module& m, uint64_t seed, const std::string& prefix = "");

// wan22-tiny's weights on top of fill_synthetic: a near-identity path and small block contributions,
// so the tiny denoiser is smooth rather than chaotic (see models.cpp).
void condition_tiny_transformer(WanTransformer3DModel& m);

// The embedded tokenizer of wan22-tiny (SentencePiece model bytes).
const std::string& tiny_tokenizer_model();

}  // namespace autooptim::runtime
