#pragma once
// The model-selection options shared by generate, bench, gate and run.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "models/model_table.h"
#include "runtime/models.h"

namespace autooptim::app {

// Why a CPU build cannot run on a GPU, and how to get the GPU build.
std::string no_cuda_build_text();

// The folder (absolute) of a model's shipped trained weights (the model table's shipped_weights_dir, a
// diffusers checkpoint folder found like prompts/), or "" when none is shipped: the embedded model then
// runs its synthetic weights.
std::string shipped_weights(const models::ModelFacts& facts);

struct ModelArgs {
  std::string model = models::kDefaultModel;
  std::string weights;
  bool synthetic = false;
  std::string device = "auto";  // auto: cuda when the build and machine have it
  std::string dtype = "auto";   // auto: bf16 on GPUs, fp32 on the CPU

  void add_to(CLI::App* cmd);
  // The model table's entry of `model` (the command line has checked the name).
  const models::ModelFacts& facts() const { return models::model_facts(model); }
  // Resolves device/dtype into a load request (throws Error for impossible combinations).
  runtime::LoadRequest request() const;
  // The embedded model trained (given weights or the shipped ones): it gates on its own prompt set,
  // captions of its data set it never saw; the random one on the harness's prompts (docs/training.md).
  bool tiny_trained() const;
};

// A manifest's switches on a load request: its options, and the compute dtype its `dtype` setting means
// on the request's device (the CPU runs bf16 manifests in fp32).
void use_switches(runtime::LoadRequest& req, const runtime::RuntimeOptions& options);
// A warning for each switch of `options` that another one on leaves idle (attention_backend under
// hopper_attention): the gate's authenticity check refuses such a manifest, after all its runs.
void warn_idle_switches(const std::string& manifest, const runtime::RuntimeOptions& options);

// Validators that read an option's text before CLI11 converts it: CLI11 clamps an integer above
// 2^63-1 to the maximum silently, reads "010" as octal, and lets nan through every range check.
// A bad value is a parse error (exit 2) naming the option.
// A decimal integer in [lo, hi]; with mod > 0 also v % mod == rem, described as `form` ("4k+1").
CLI::Validator int_in(int64_t lo, int64_t hi, int64_t mod = 0, int64_t rem = 0, const std::string& form = "");
// A finite decimal number in [lo, hi] ((lo, hi] when lo_open).
CLI::Validator number_in(double lo, double hi, bool lo_open = false);
// The checks of a clip's size shared by generate, bench and run.
CLI::Validator frames_count();  // 4k+1 in [1, 100001]
CLI::Validator pixel_size();    // multiple of 16 in [16, 16384]; the model's own multiple is checked on load
CLI::Validator step_count();    // [1, 1000]

}  // namespace autooptim::app
