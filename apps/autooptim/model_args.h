#pragma once
// The model-selection options shared by generate, bench, gate and run.
#include <CLI/CLI.hpp>

#include <string>

#include "runtime/models.h"

namespace autooptim::app {

// Why a CPU build cannot run on a GPU, and how to get the GPU build.
std::string no_cuda_build_text();

struct ModelArgs {
  std::string model = "wan22-tiny";
  std::string weights;
  bool synthetic = false;
  std::string device = "auto";  // auto: cuda when the build and machine have it
  std::string dtype = "auto";   // auto: bf16 on GPUs, fp32 on the CPU

  void add_to(CLI::App* cmd);
  // Resolves device/dtype into a load request (throws Error for impossible combinations).
  runtime::LoadRequest request() const;
};

}  // namespace autooptim::app
