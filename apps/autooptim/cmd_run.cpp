// autooptim run: the product's main job (orchestrator), and autooptim executor: one family's search
// process, spawned by run.
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "data_dirs.h"
#include "executors/executor.h"
#include "gates/prompts.h"
#include "model_args.h"
#include "orchestrator/orchestrator.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace fs = std::filesystem;

namespace autooptim::app {
namespace {

std::vector<std::string> model_cli(const ModelArgs& m) {
  std::vector<std::string> a = {"--model", m.model, "--device", m.device, "--dtype", m.dtype};
  if (!m.weights.empty()) a.insert(a.end(), {"--weights", fs::absolute(m.weights).string()});
  if (m.synthetic) a.push_back("--synthetic-weights");
  return a;
}

}  // namespace

void add_run(CLI::App& app) {
  auto model = std::make_shared<ModelArgs>();
  auto req = std::make_shared<orchestrator::RunRequest>();
  auto* cmd = app.add_subcommand("run", "Search every technique family, gate the proposals, compose, and report the tiers");
  model->add_to(cmd);
  cmd->add_option("--out", req->out_dir, "Folder for the report, ledger and every gate run's artifacts")->required();
  // Defaults that depend on the model are shown for both (the tiny model's small run fits a CI machine).
  cmd->add_option("--budget-trials", req->budget_trials, "Gate runs at most")->default_str("10 for wan22-tiny, 40 for wan22-ti2v-5b")->check(int_in(1, 1000000));
  cmd->add_option("--budget-minutes", req->budget_minutes, "Wall-clock budget")->default_str("4 for wan22-tiny, 60 for wan22-ti2v-5b")->check(number_in(0, 525600, true));
  cmd->add_option("--executor-trials", req->executor_trials, "Measurements each executor may make")
      ->default_str("5 for wan22-tiny, 8 for wan22-ti2v-5b")->check(int_in(1, 1000000));
  cmd->add_flag("--resume", req->resume, "Continue an interrupted run from its ledger");
  cmd->add_option("--split", req->split, "Visible split the candidates are gated on")->capture_default_str()->check(CLI::IsMember(gates::visible_splits()));
  cmd->add_option("--heldout-split", req->heldout_split, "Held-out split every tier candidate is checked on")->capture_default_str()->check(CLI::IsMember(gates::heldout_splits()));
  cmd->add_option("--prompts-dir", req->prompts_dir, "Folder of visible.jsonl and heldout.jsonl")
      ->default_str("prompts/ here, next to the binary, or installed");
  cmd->add_option("--manifests-dir", req->manifests_dir, "Folder of manifests/<model>/ (its baseline.json must be the pinned baseline's copy)")
      ->default_str("manifests/ here, next to the binary, or installed");
  cmd->add_option("--repeats", req->gate.timing_repeats, "Interleaved timed pairs per gate run")->default_str("2 for wan22-tiny, 3 for wan22-ti2v-5b")->check(int_in(1, 1000));
  cmd->add_option("--max-prompts", req->gate.max_prompts, "Prompts per split at most (0 = all)")->default_str("2 for wan22-tiny, 0 for wan22-ti2v-5b")->check(int_in(0, 1000000));
  auto* fail_tier = cmd->add_option("--fail-if-no-tier", req->fail_if_no_tier,
                                    "CI: exit 1 unless a tier was reached (BUCKET: unless that one: 1.5x, 2x, 3x or 4x)")
                        ->expected(0, 1)
                        ->type_name("[BUCKET]")
                        ->check(CLI::IsMember({"", "any", "1.5x", "2x", "3x", "4x"}));
  cmd->add_option("--min-psnr", req->gate.min_psnr, "Quality tolerance of lossy candidates (dB)")->capture_default_str()->check(number_in(0, 200));
  cmd->add_option("--min-ssim", req->gate.min_ssim, "Quality tolerance of lossy candidates (SSIM)")->capture_default_str()->check(number_in(0, 1));
  cmd->add_option("--frames", req->frames, "Reduced configuration: frames (no tier can be won)")->check(frames_count());
  cmd->add_option("--steps", req->steps, "Reduced configuration: steps (no tier can be won)")->check(step_count());
  cmd->add_option("--height", req->height, "Reduced configuration: height (no tier can be won)")->check(pixel_size());
  cmd->add_option("--width", req->width, "Reduced configuration: width (no tier can be won)")->check(pixel_size());
  cmd->callback([model, req, cmd, fail_tier] {
    if (fail_tier->count() > 0 && req->fail_if_no_tier.empty()) req->fail_if_no_tier = "any";
    req->prompts_dir = find_data_dir("prompts", req->prompts_dir, cmd->count("--prompts-dir") > 0);
    req->manifests_dir = find_data_dir("manifests", req->manifests_dir, cmd->count("--manifests-dir") > 0);
    req->command_line = command_line();
    // The embedded tiny model's run must fit a 2-core CI machine in under 5 minutes: a smaller
    // budget and the first prompts of each split, unless the user says otherwise.
    if (model->model == "wan22-tiny") {
      if (cmd->count("--budget-minutes") == 0) req->budget_minutes = 4.0;
      if (cmd->count("--budget-trials") == 0) req->budget_trials = 10;
      if (cmd->count("--executor-trials") == 0) req->executor_trials = 5;
      if (cmd->count("--max-prompts") == 0) req->gate.max_prompts = 2;
      if (cmd->count("--repeats") == 0) req->gate.timing_repeats = 2;
    }
    req->load = model->request();
    // FP8 GEMMs exist only on GPUs: the quantisation family's executor runs there.
    if (req->load.precision.device.is_cuda() &&
        std::find(req->families.begin(), req->families.end(), "quant") == req->families.end())
      req->families.push_back("quant");
    req->model_cli = model_cli(*model);
    const auto outcome = orchestrator::run(*req);
    std::printf("report: %s\n", outcome.report_path.c_str());
    std::printf("        %s\n", (fs::path(outcome.report_path).parent_path() / "report.html").c_str());
    for (const auto& w : outcome.warnings) log::warn(w);
    // The reason for a non-zero exit goes to stderr whatever the log level: CI shows it.
    for (const auto& p : outcome.problems) std::fprintf(stderr, "autooptim: %s: %s\n", outcome.exit_code == 1 ? "check failed" : "error", p.c_str());
    exit_status() = outcome.exit_code;
  });
}

void add_executor(CLI::App& app) {
  auto model = std::make_shared<ModelArgs>();
  auto req = std::make_shared<executors::ExecutorRequest>();
  auto* cmd = app.add_subcommand("executor", "One technique family's search process (spawned by run)");
  model->add_to(cmd);
  cmd->add_option("--family", req->family, "kernel, cache or sparse")->required()->check(CLI::IsMember({"kernel", "cache", "sparse"}));
  cmd->add_option("--base", req->base_manifest, "Baseline manifest")->required()->check(CLI::ExistingFile);
  cmd->add_option("--prompts", req->prompts_file, "Visible prompts (JSON lines)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--outbox", req->outbox, "Folder the proposals are written to")->required();
  cmd->add_option("--budget-trials", req->budget_trials)->capture_default_str()->check(int_in(1, 1000000));
  cmd->add_option("--min-psnr", req->min_psnr)->capture_default_str()->check(number_in(0, 200));
  cmd->add_option("--device-lock", req->device_lock, "Lock file held while timing (shared by the run's executors)");
  cmd->callback([model, req] {
    req->load = model->request();
    const int n = executors::run_executor(*req);
    std::printf("%d manifests proposed in %s\n", n, req->outbox.c_str());
  });
}

}  // namespace autooptim::app
