// autooptim bench: times each stage of the pipeline with device events after warm-up, and reports
// medians, spread, peak memory and FLOP-based efficiency against the measured matmul peak. The timing is
// runtime/benchmark.h; here the options, the manifests they name, and the printing.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "gates/manifest.h"
#include "model_args.h"
#include "models/model_table.h"
#include "base/error.h"
#include "base/log.h"
#include "runtime/benchmark.h"
#include "runtime/techniques/registry.h"

namespace autooptim::app {
namespace {

struct BenchArgs {
  ModelArgs model;
  std::string manifest;
  runtime::BenchSettings settings;
  std::vector<std::string> vae_manifests;
  std::string json;
};

// The load request with the manifest's flags (and its compute dtype on a GPU); the manifest goes in the results.
runtime::LoadRequest load_request(const BenchArgs& a, nlohmann::json& out) {
  auto req = a.model.request();
  if (a.manifest.empty()) return req;
  const auto m = gates::load_manifest(a.manifest);
  if (m.model != a.model.model)
    throw Error(a.manifest + ": manifest is for model '" + m.model + "', not '" + a.model.model + "'");
  req.options = gates::to_runtime_options(m);
  warn_idle_switches(a.manifest, req.options);
  if (req.precision.device.is_cuda()) req.precision.compute = req.options.dtype == "fp32" ? at::kFloat : at::kBFloat16;
  out["manifest"] = gates::to_json(m);
  return req;
}

// Each --vae-manifest's VAE switches, labelled by its id ('/' -> '_').
std::vector<std::pair<std::string, runtime::RuntimeOptions>> vae_switches(const std::vector<std::string>& paths) {
  std::vector<std::pair<std::string, runtime::RuntimeOptions>> out;
  for (const auto& path : paths) {
    const auto m = gates::load_manifest(path);
    const auto o = gates::to_runtime_options(m);
    if (!runtime::techniques::works_on_decode(o))
      throw Error(path + ": --vae-manifest has no VAE switch on (vae_bf16, vae_channels_last, ...)");
    std::string label = m.id;
    for (auto& ch : label)
      if (ch == '/') ch = '_';
    out.emplace_back(label, o);
  }
  return out;
}

void run_bench(BenchArgs& a) {
  runtime::check_bench_settings(a.settings, a.model.facts().pixel_multiple);
  nlohmann::json out;
  const auto req = load_request(a, out);
  if (!a.settings.skip_vae) a.settings.vae_switches = vae_switches(a.vae_manifests);
  log::Progress progress;  // a live line on a terminal, plain lines in a log
  runtime::BenchReporter reporter;
  reporter.line = [](const std::string& text) { std::fputs(text.c_str(), stderr); };
  reporter.generation_step = [&progress](int64_t i, int64_t n, double s) {
    char b[96];
    std::snprintf(b, sizeof b, "step %lld/%lld %.3f s", static_cast<long long>(i + 1), static_cast<long long>(n), s);
    progress.update("generation", b);
  };
  reporter.generation_done = [&progress] { progress.clear(); };
  out.update(runtime::run_benchmark(req, a.settings, reporter));
  const std::string s = out.dump(2);
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    if (!f) throw Error(a.json + ": cannot write");
    f << s << "\n";
  }
  std::cout << s << "\n";
}

}  // namespace

void add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand(
      "bench", "Time each stage (load, text encoding, transformer forward, denoising step, VAE decode)");
  a->model.add_to(cmd);
  cmd->add_option("--manifest", a->manifest, "Apply this manifest's flags")->check(CLI::ExistingFile);
  cmd->add_option("--steps", a->settings.steps, "Denoising steps to time")->capture_default_str()->check(step_count());
  cmd->add_option("--frames", a->settings.frames, "Frames, 4k+1")->capture_default_str()->check(frames_count());
  cmd->add_option("--height", a->settings.height, "Height, a multiple of 16 (32 for TI2V-5B)")
      ->capture_default_str()
      ->check(pixel_size());
  cmd->add_option("--width", a->settings.width, "Width, a multiple of 16 (32 for TI2V-5B)")
      ->capture_default_str()
      ->check(pixel_size());
  cmd->add_option("--repeat", a->settings.repeat, "Timed repetitions of each stage after warm-up")
      ->capture_default_str()
      ->check(int_in(1, 1000));
  cmd->add_flag("--skip-vae", a->settings.skip_vae, "Do not time the VAE decode");
  cmd->add_option(
         "--vae-manifest", a->vae_manifests,
         "Also time the decode under this manifest's VAE switches (repeatable; one fp32 reference, one process)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--vae-only", a->settings.vae_only,
                "Time only the VAE decode (of random latents): no text encoding, forward or steps");
  cmd->add_flag("--profile", a->settings.profile,
                "Also print where the forward's and the VAE decode's time goes, by category (GEMMs, attention, "
                "norms/elementwise, RoPE, layout copies, other)");
  cmd->add_flag("--profile-detail", a->settings.profile_detail,
                "With --profile: also by operation (each GEMM and convolution shape, self and cross attention, "
                "time/text/rope embedding) with calls, milliseconds and TFLOP/s");
  cmd->add_option("--at-step", a->settings.at_step,
                  "Denoising step the timed forwards stand for (step-dependent techniques, e.g. sparse dense_steps)")
      ->capture_default_str();
  cmd->add_flag("--full-generation", a->settings.full_generation,
                "Also time one complete generation (CFG, --generation-steps)");
  cmd->add_option("--generation-steps", a->settings.generation_steps, "Steps of the complete generation")
      ->capture_default_str()
      ->check(step_count());
  cmd->add_option("--json", a->json, "Write the results here");
  cmd->callback([a, cmd] {
    {  // the size defaults are the model's official setting (the model table's)
      const models::OfficialRun& o = a->model.facts().official;
      if (cmd->count("--height") == 0) a->settings.height = o.height;
      if (cmd->count("--width") == 0) a->settings.width = o.width;
      if (cmd->count("--frames") == 0) a->settings.frames = o.frames;
    }
    if (a->settings.profile_detail) a->settings.profile = true;
    if (a->settings.vae_only && a->settings.skip_vae)
      throw CLI::ValidationError("--vae-only", "cannot be combined with --skip-vae");
    run_bench(*a);
  });
}

}  // namespace autooptim::app
