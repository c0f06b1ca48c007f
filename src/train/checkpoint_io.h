#pragma once
// Writing wan22-tiny in the diffusers checkpoint layout that `--weights DIR` (and the shipped default)
// loads: model_index.json, transformer/, vae/, text_encoder/ (config.json + safetensors under the
// checkpoint's parameter names), tokenizer/spiece.model and scheduler/scheduler_config.json.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/umt5.h"
#include "runtime/unipc_scheduler.h"
#include "runtime/wan_transformer.h"
#include "runtime/wan_vae.h"

namespace autooptim::train {

// Every parameter of m by its dotted (checkpoint) name, detached, float32, CPU.
std::vector<std::pair<std::string, at::Tensor>> named_tensors(const torch::nn::Module& m);

struct TinyCheckpoint {
  const torch::nn::Module* transformer = nullptr;
  const torch::nn::Module* vae = nullptr;
  const torch::nn::Module* text_encoder = nullptr;
  runtime::WanTransformerConfig transformer_config;
  runtime::WanVAEConfig vae_config;  // with latents_mean/std of the trained VAE
  runtime::UMT5Config text_config;
  runtime::UniPCConfig scheduler;
};

// Writes the folder (each file written aside and renamed into place). The tokenizer is the embedded one.
void write_tiny_checkpoint(const std::string& dir, const TinyCheckpoint& c);

}  // namespace autooptim::train
