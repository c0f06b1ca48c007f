#include "model_args.h"

#include "runtime/device.h"
#include "runtime/error.h"

namespace autooptim::app {

void ModelArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model, "wan22-tiny (embedded) or wan22-ti2v-5b")
      ->check(CLI::IsMember({"wan22-tiny", "wan22-ti2v-5b"}));
  cmd->add_option("--weights,--model-dir", weights, "Diffusers checkpoint folder (Wan2.2-TI2V-5B-Diffusers)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--synthetic-weights", synthetic, "Full-size model with deterministic random weights (speed work)");
  cmd->add_option("--device", device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--dtype", dtype, "auto, bf16 or fp32 (transformer compute dtype)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
}

runtime::LoadRequest ModelArgs::request() const {
  runtime::LoadRequest r;
  r.model = model;
  r.weights_dir = weights;
  r.synthetic_weights = synthetic;
  const bool cuda = device == "cuda" || (device == "auto" && runtime::cuda_available());
  if (cuda && !runtime::cuda_available()) throw Error("--device cuda: this build or machine has no CUDA GPU");
  r.precision.device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const std::string d = dtype == "auto" ? (cuda ? "bf16" : "fp32") : dtype;
  r.precision.compute = d == "bf16" ? at::kBFloat16 : at::kFloat;
  r.options.dtype = d;
  return r;
}

}  // namespace autooptim::app
