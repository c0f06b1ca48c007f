// autooptim verify --golden DIR [--json] [--device cpu|cuda] [--dtype fp32|bf16] [--tolerance X]
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "model_args.h"
#include "runtime/device.h"
#include "base/error.h"
#include "runtime/verify.h"

namespace autooptim::app {
namespace {

struct VerifyArgs {
  std::string golden;
  bool json = false;
  std::string device = "cpu";
  std::string dtype = "fp32";
  double tolerance = -1;
};

void run_verify(const VerifyArgs& a) {
  runtime::VerifyOptions o;
  if (a.device == "cuda") {
    if (!at::hasCUDA()) throw Error("--device cuda: this build or machine has no CUDA");
    o.precision.device = at::Device(at::kCUDA);
  }
  o.precision.compute = a.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  runtime::set_strict_fp32(true);  // the reference's float32 is IEEE float32
  // float32 on the CPU must hold 1e-5; GPU kernels reorder sums (1e-4); bf16 rounds (2e-2).
  o.fp32_tolerance = a.device == "cuda" ? 1e-4 : 1e-5;
  o.tolerance = a.tolerance > 0 ? a.tolerance : a.dtype == "bf16" ? 2e-2 : o.fp32_tolerance;
  const auto rep = runtime::verify_golden_dir(a.golden, o);
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rep.rows)
      out.push_back({{"component", r.component},
                     {"tensor", r.tensor},
                     {"rel_l2", r.rel_l2},
                     {"max_abs", r.max_abs},
                     {"pass", r.pass}});
    std::cout << out.dump(1) << "\n";
  } else {
    std::printf("%-20s %-36s %12s %12s %10s  %s\n", "component", "tensor", "rel_l2", "max_abs", "tolerance", "result");
    for (const auto& r : rep.rows)
      std::printf("%-20s %-36s %12.3e %12.3e %10.1e  %s\n", r.component.c_str(), r.tensor.c_str(), r.rel_l2, r.max_abs,
                  r.tolerance, r.pass ? "pass" : "FAIL");
    size_t fails = 0;
    for (const auto& r : rep.rows) fails += !r.pass;
    std::printf("%zu tensors, %zu failed\n", rep.rows.size(), fails);
  }
  for (const auto& s : rep.skipped) std::cerr << "autooptim verify: skipped " << s << "\n";
  exit_status() = rep.all_pass() ? 0 : 1;
}

}  // namespace

void add_verify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  auto* cmd = app.add_subcommand("verify", "Run each component on golden reference inputs and compare its outputs");
  cmd->add_option("--golden", args->golden, "Folder of <name>_weights.* / <name>_io.* pairs")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--json", args->json, "Print a JSON list of {component, tensor, rel_l2, max_abs, pass}");
  cmd->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", args->dtype, "Compute dtype of the linear layers and attention")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--tolerance", args->tolerance, "Relative L2 tolerance (default by device and dtype)")
      ->check(number_in(0, 1, true));
  cmd->callback([args] { run_verify(*args); });
}

}  // namespace autooptim::app
