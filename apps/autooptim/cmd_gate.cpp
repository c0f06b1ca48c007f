// autooptim gate: decides whether one manifest is accepted (exit 0), rejected (1), or could not run (2).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "data_dirs.h"
#include "gate_args.h"
#include "gates/gate.h"
#include "gates/sandboxed_worker.h"
#include "gates/metrics.h"
#include "model_args.h"
#include "models/model_table.h"
#include "base/error.h"
#include "base/log.h"

namespace fs = std::filesystem;

namespace autooptim::app {
namespace {

struct GateArgs {
  ModelArgs model;
  std::string manifest;
  std::string split = "val";
  std::string out;
  std::string ledger;
  bool json = false;
  bool allow_redteam = false;
  bool prompts_dir_given = false;
  int64_t frames = 0, steps = 0, height = 0, width = 0;  // a reduced configuration of the pinned baseline
  std::vector<std::string> plugins;                      // technique plugins (never loaded here)
  gates::GateSettings settings;
};

void print_verdict(const gates::GateVerdict& v) {
  std::printf("%s on %s: %s\n", v.manifest_id.c_str(), v.split.c_str(),
              v.refused    ? "REFUSED"
              : v.accepted ? "ACCEPTED"
                           : "REJECTED");
  for (const auto& c : v.checks)
    std::printf("  %-16s %-4s %s\n", c.name.c_str(), c.pass ? "pass" : "FAIL", c.reason.c_str());
  if (!v.refused) {
    char psnr[32];
    if (v.psnr >= gates::kPsnrCap)
      std::snprintf(psnr, sizeof psnr, "identical");  // bit-identical clips: no dB figure
    else
      std::snprintf(psnr, sizeof psnr, "%.2f dB", v.psnr);
    std::printf("  baseline %.3f s, candidate %.3f s, speedup %.3fx, worst PSNR %s, worst SSIM %.4f\n",
                v.baseline_seconds, v.candidate_seconds, v.speedup, psnr, v.ssim);
  }
}

}  // namespace

std::string gate_progress_key(const gates::GateProgress& p) {
  return "[gate " + p.manifest_id + " / " + p.split + "] " + p.stage;
}

std::string gate_progress_detail(const gates::GateProgress& p) {
  const int s = static_cast<int>(p.elapsed_s);
  return "run " + std::to_string(p.run) + "/" + std::to_string(p.runs) + "  " + std::to_string(s / 60) + "m" +
         (s % 60 < 10 ? "0" : "") + std::to_string(s % 60) + "s elapsed";
}

namespace {

void run_gate_cmd(GateArgs& a) {
  gates::ParseOptions parse;
  parse.allow_redteam = a.allow_redteam;  // the harness's own tests: the worker below allows them too
  // A plugin's techniques are known here by their description, asked of a sandboxed worker that loads it.
  for (const auto& p : a.plugins)
    a.settings.plugin_files[gates::describe_plugin(p, a.settings.plugin_without_sandbox)] = p;
  const auto m = gates::load_manifest(a.manifest, parse);
  warn_idle_switches(a.manifest, gates::to_runtime_options(m));
  if (m.model != a.model.model) a.model.model = m.model;  // the manifest names its model
  // The trained embedded model gates on its own prompts, as `run` does (--prompts-dir overrides).
  if (a.model.tiny_trained() && !a.prompts_dir_given)
    a.settings.prompts_dir = find_data_dir(a.model.facts().own_prompts->dir, "", false);
  // A reduced configuration: the pinned baseline runs at it (a candidate at the official one then fails
  // official_config, as in a reduced `run`; one at the same reduced size is compared clip for clip).
  if (a.frames || a.steps || a.height || a.width)
    a.settings.baseline_config =
        gates::with_sizes(gates::pinned_baseline(m.model).config, a.frames, a.steps, a.height, a.width);
  auto req = a.model.request();
  gates::Worker worker(req);
  worker.allow_redteam(a.allow_redteam);
  fs::create_directories(a.out);
  gates::Ledger ledger(a.ledger.empty() ? (fs::path(a.out) / "ledger.jsonl").string() : a.ledger);
  if (req.precision.device.is_cuda()) a.settings.exact_off_identity = false;
  // Progress: which generation of how many, what for, and how long the gate has run.
  log::Progress progress;
  a.settings.progress = [&progress](const gates::GateProgress& p) {
    progress.update(gate_progress_key(p), gate_progress_detail(p));
  };
  log::info("gate " + m.id + " on " + a.split + ": " + worker.weights_label() + " weights, loaded in " +
            std::to_string(worker.load_seconds()).substr(0, 5) + " s");
  const auto v = gates::run_gate(worker, m, a.split, a.out, a.settings, &ledger);
  progress.clear();
  if (a.json)
    std::cout << v.to_json().dump(2) << "\n";
  else
    print_verdict(v);
  exit_status() = v.accepted ? 0 : 1;
}

}  // namespace

void add_gate(CLI::App& app) {
  auto a = std::make_shared<GateArgs>();
  auto* cmd = app.add_subcommand(
      "gate", "Run a manifest and its baseline on a prompt split and decide the six gates and authenticity");
  a->model.add_to(cmd);
  cmd->add_option("--manifest", a->manifest, "The candidate manifest")->required()->check(CLI::ExistingFile);
  cmd->add_option("--split", a->split, "smoke, val, core, heldout16, heldout60")
      ->capture_default_str()
      ->check(CLI::IsMember({"smoke", "val", "core", "heldout16", "heldout60"}));
  cmd->add_option("--out", a->out, "Folder for the run's artifacts")->required();
  cmd->add_option("--ledger", a->ledger, "Append-only ledger (default: OUT/ledger.jsonl)");
  cmd->add_option("--prompts-dir", a->settings.prompts_dir, "Folder of visible.jsonl and heldout.jsonl")
      ->default_str("prompts/ here, next to the binary, or installed");
  cmd->add_option("--cache-dir", a->settings.cache_dir, "Baseline output cache (default OUT/../baseline-cache)");
  cmd->add_option(
      "--baseline-records", a->settings.records_path,
      "Records of the baseline's times on this machine (default: next to the cache, baseline-records.json)");
  cmd->add_option("--repeats", a->settings.timing_repeats, "Interleaved timed baseline/candidate pairs")
      ->capture_default_str()
      ->check(int_in(1, 1000));
  cmd->add_option("--max-prompts", a->settings.max_prompts, "Use only the first N prompts of the split (0 = all)")
      ->check(int_in(0, 1000000));
  cmd->add_option("--min-psnr", a->settings.min_psnr, "Quality tolerance (lossy): worst clip PSNR, dB")
      ->capture_default_str()
      ->check(number_in(0, 200));
  cmd->add_option("--min-ssim", a->settings.min_ssim, "Quality tolerance (lossy): worst clip SSIM")
      ->capture_default_str()
      ->check(number_in(0, 1));
  cmd->add_option("--frames", a->frames, "Reduced configuration: the baseline's frames (official_config fails)")
      ->check(frames_count());
  cmd->add_option("--steps", a->steps, "Reduced configuration: the baseline's steps (official_config fails)")
      ->check(step_count());
  cmd->add_option("--height", a->height, "Reduced configuration: the baseline's height (official_config fails)")
      ->check(pixel_size());
  cmd->add_option("--width", a->width, "Reduced configuration: the baseline's width (official_config fails)")
      ->check(pixel_size());
  cmd->add_option("--plugin", a->plugins,
                  "A technique plugin the manifest may pin (autooptim agent build; repeatable): it runs in a sandboxed "
                  "worker process, never in the gate")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--plugin-without-sandbox", a->settings.plugin_without_sandbox,
                "Where this machine has no OS sandbox (bwrap), run the plugin's worker as a plain process");
  cmd->add_option("--plugin-run-timeout", a->settings.plugin_run_timeout_s,
                  "Seconds a plugin's generation may take before it fails and its worker is killed (0: ten times the "
                  "baseline's clip, measured at the warm-up, at least 60 s)")
      ->capture_default_str()
      ->check(number_in(0, 1e6));
  add_gate_judgement_options(cmd, a->settings);
  cmd->add_flag("--json", a->json, "Print the verdict as JSON");
  cmd->add_flag("--allow-redteam", a->allow_redteam, "Accept red-team flags in manifests (the harness's own tests)");
  cmd->callback([a, cmd] {
    a->prompts_dir_given = cmd->count("--prompts-dir") > 0;
    a->settings.prompts_dir = find_data_dir("prompts", a->settings.prompts_dir, a->prompts_dir_given);
    run_gate_cmd(*a);
  });
}

}  // namespace autooptim::app
