#include "model_args.h"

#include "runtime/build_info.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace autooptim::app {

std::string no_cuda_build_text() {
  return "this is a CPU build of autooptim (libtorch " + runtime::build_info().libtorch +
         " without CUDA), so it cannot use a GPU; build the GPU flavour against a CUDA libtorch: "
         "make gpu LIBTORCH=<libtorch>/share/cmake (README, \"GPU build\"); autooptim --version shows the flavour";
}

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
  if (cuda && !runtime::cuda_available())
    throw Error(runtime::built_with_cuda() ? "--device cuda: this machine has no CUDA GPU that libtorch can see (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                                          : "--device cuda: " + no_cuda_build_text());
  // The 5B model on the CPU takes hours per clip and more memory than most machines have: --device
  // auto does not fall back to it silently (--device cpu still asks for it on purpose).
  if (!cuda && device == "auto" && model == "wan22-ti2v-5b") {
    if (!weights.empty()) runtime::read_checkpoint_configs(weights);  // a broken folder is the first thing to fix
    throw Error(runtime::built_with_cuda()
                    ? "--device auto: no CUDA GPU is visible, and wan22-ti2v-5b is meant for one (check nvidia-smi and "
                      "CUDA_VISIBLE_DEVICES; --device cpu runs it on the CPU anyway, hours per clip)"
                    : "--device auto: " + no_cuda_build_text() + "; --device cpu runs wan22-ti2v-5b on the CPU anyway (hours per clip, tens of GB of memory)");
  }
  r.precision.device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const std::string d = dtype == "auto" ? (cuda ? "bf16" : "fp32") : dtype;
  r.precision.compute = d == "bf16" ? at::kBFloat16 : at::kFloat;
  r.options.dtype = d;
  return r;
}

}  // namespace autooptim::app
