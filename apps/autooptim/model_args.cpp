#include "model_args.h"
#include "models/model_table.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "data_dirs.h"
#include "runtime/build_info.h"
#include "base/log.h"
#include "runtime/device.h"
#include "base/error.h"
#include "runtime/techniques/registry.h"

namespace autooptim::app {

std::string no_cuda_build_text() {
  return "this is a CPU build of autooptim (libtorch " + runtime::build_info().libtorch +
         " without CUDA), so it cannot use a GPU; build the GPU flavour against a CUDA libtorch: "
         "make gpu LIBTORCH=<libtorch>/share/cmake (README, \"GPU build\"); autooptim --version shows the flavour";
}

namespace {

// "wan22-tiny (embedded) or wan22-ti2v-5b": the table's models in its order.
std::string model_choices() {
  std::string text;
  for (const auto& m : models::model_table())
    text += (text.empty() ? "" : " or ") + m.name + (m.embedded ? " (embedded)" : "");
  return text;
}

}  // namespace

void ModelArgs::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model, model_choices())->check(CLI::IsMember(models::model_names()));
  cmd->add_option(
         "--weights,--model-dir", weights,
         "Diffusers checkpoint folder (Wan2.2-TI2V-5B-Diffusers, or a trained wan22-tiny from autooptim train)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--synthetic-weights", synthetic,
                "Deterministic random weights: the full-size model for speed work, or wan22-tiny's random conditioned "
                "model instead of its shipped trained weights");
  cmd->add_option("--device", device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--dtype", dtype, "auto, bf16 or fp32 (transformer compute dtype)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  for (const char* n : {"--model", "--weights", "--synthetic-weights", "--device", "--dtype"})
    cmd->get_option(n)->group("Model");
}

bool ModelArgs::tiny_trained() const {
  const models::ModelFacts& f = facts();
  return f.embedded && !synthetic && (!weights.empty() || !shipped_weights(f).empty());
}

runtime::LoadRequest ModelArgs::request() const {
  runtime::LoadRequest r;
  r.model = model;
  r.weights_dir = weights;
  r.synthetic_weights = synthetic;
  const models::ModelFacts& f = facts();
  if (!f.shipped_weights_dir.empty() && !synthetic && weights.empty()) {
    r.weights_dir = shipped_weights(f);
    if (r.weights_dir.empty()) {
      static bool said = false;
      if (!said)
        log::debug(f.name + ": no trained weights shipped (" + f.shipped_weights_dir + "), using the synthetic model");
      said = true;
    }
  }
  const bool cuda = device == "cuda" || (device == "auto" && runtime::cuda_available());
  if (cuda && !runtime::cuda_available())
    throw Error(runtime::built_with_cuda() ? "--device cuda: this machine has no CUDA GPU that libtorch can see (check "
                                             "nvidia-smi and CUDA_VISIBLE_DEVICES)"
                                           : "--device cuda: " + no_cuda_build_text());
  // The 5B model on the CPU takes hours per clip and more memory than most machines have: --device
  // auto does not fall back to it silently (--device cpu still asks for it on purpose).
  if (!cuda && device == "auto" && f.wants_gpu) {
    if (!weights.empty()) runtime::read_checkpoint_configs(weights);  // a broken folder is the first thing to fix
    throw Error(runtime::built_with_cuda()
                    ? "--device auto: no CUDA GPU is visible, and " + f.name +
                          " is meant for one (check nvidia-smi and CUDA_VISIBLE_DEVICES; --device cpu runs it on "
                          "the CPU anyway, hours per clip)"
                    : "--device auto: " + no_cuda_build_text() + "; --device cpu runs " + f.name +
                          " on the CPU anyway (hours per clip, tens of GB of memory)");
  }
  r.precision.device = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const std::string d = dtype == "auto" ? (cuda ? "bf16" : "fp32") : dtype;
  r.precision.compute = d == "bf16" ? at::kBFloat16 : at::kFloat;
  r.options.dtype = d;
  return r;
}

void use_switches(runtime::LoadRequest& req, const runtime::RuntimeOptions& options) {
  req.options = options;
  req.precision.compute = runtime::compute_dtype(options.dtype, req.precision.device);
}

void warn_idle_switches(const std::string& manifest, const runtime::RuntimeOptions& options) {
  for (const auto& [idle, by] : runtime::techniques::superseded(options))
    log::warn(manifest + ": " + idle + " sits idle under " + by +
              ", which does its work; the gate's authenticity check " + "refuses a manifest with both: leave " + idle +
              " out");
}

std::string shipped_weights(const models::ModelFacts& facts) {
  if (facts.shipped_weights_dir.empty()) return "";
  std::error_code ec;
  for (const auto& d : data_dir_candidates(facts.shipped_weights_dir))
    if (std::filesystem::exists(std::filesystem::path(d) / "model_index.json", ec))
      return std::filesystem::absolute(d).string();
  return "";
}

namespace {

std::string shown(const std::string& s) { return "'" + (s.size() > 40 ? s.substr(0, 37) + "..." : s) + "'"; }

}  // namespace

CLI::Validator int_in(int64_t lo, int64_t hi, int64_t mod, int64_t rem, const std::string& form) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        int64_t v = 0;
        const char* b = text.data();
        const char* e = b + text.size();
        const auto r = std::from_chars(b, e, v, 10);
        if (r.ec == std::errc::result_out_of_range)
          return shown(text) + " is outside the 64-bit integer range (at most 9223372036854775807)";
        if (r.ec != std::errc() || r.ptr != e || text.empty()) return shown(text) + " is not a decimal integer";
        if (v < lo || v > hi) return text + " is out of range " + range;
        if (mod > 0 && ((v % mod) + mod) % mod != rem) return text + " is not " + form;
        return "";
      },
      mod > 0 ? form + " in " + range : "integer in " + range);
}

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  auto shown_number = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  const std::string range = std::string(lo_open ? "(" : "[") + shown_number(lo) + ", " + shown_number(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        if (text.empty()) return "an empty value is not a number";
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end != text.c_str() + text.size()) return shown(text) + " is not a number";
        if (!std::isfinite(v) || errno == ERANGE) return shown(text) + " is not a finite number";
        if (v > hi || v < lo || (lo_open && v == lo)) return text + " is out of range " + range;
        return "";
      },
      "number in " + range);
}

CLI::Validator frames_count() { return int_in(1, 100001, 4, 1, "of the form 4k+1"); }
CLI::Validator pixel_size() { return int_in(16, 16384, 16, 0, "a multiple of 16 (of 32 for the 16x-VAE models)"); }
CLI::Validator step_count() { return int_in(1, 1000); }

}  // namespace autooptim::app
