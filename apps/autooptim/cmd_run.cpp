// autooptim run: the product's main job (orchestrator), and autooptim executor: one family's search
// process, spawned by run.
#include <sched.h>
#include <torch/cuda.h>

#include <cstdio>
#include <algorithm>
#include <thread>
#include <utility>
#include <vector>
#include <filesystem>
#include <iostream>
#include <memory>

#include "agent_args.h"
#include "commands.h"
#include "run_config.h"
#include "data_dirs.h"
#include "gate_args.h"
#include "executors/executor.h"
#include "gates/prompts.h"
#include "model_args.h"
#include "models/model_table.h"
#include "orchestrator/orchestrator.h"
#include "runtime/device.h"
#include "runtime/build_info.h"
#include "base/error.h"
#include "base/log.h"

namespace fs = std::filesystem;

namespace autooptim::app {
namespace {

std::vector<std::string> model_cli(const ModelArgs& m) {
  std::vector<std::string> a = {"--model", m.model, "--device", m.device, "--dtype", m.dtype};
  if (!m.weights.empty()) a.insert(a.end(), {"--weights", fs::absolute(m.weights).string()});
  if (m.synthetic) a.push_back("--synthetic-weights");
  return a;
}

using RunRequestPtr = std::shared_ptr<orchestrator::RunRequest>;

// The options whose presence the run's callback asks for, beyond their values.
struct RunOptionHandles {
  CLI::Option* out = nullptr;
  CLI::Option* gpus = nullptr;
  CLI::Option* workers = nullptr;
  CLI::Option* fail_tier = nullptr;
};

// --out, --plan, and this host's workers: --gpus or --workers.
void add_run_output_options(CLI::App* cmd, const RunRequestPtr& req, RunOptionHandles& given) {
  given.out = cmd->add_option("--out", req->out_dir,
                              "Folder for the report, ledger and every gate run's artifacts (not needed with --plan)");
  cmd->add_flag(
      "--plan", req->plan,
      "Calibrate (one forward, one decode), print the estimated device time of the run and the budget, and exit; "
      "exit 2 when the budget cannot gate one candidate");
  given.gpus =
      cmd->add_option("--gpus", req->gpus, "One worker per GPU: all, or a list like 0,1 (GPU builds; default 0)");
  given.workers = cmd->add_option("--workers", req->workers, "CPU workers, each with its share of the cores")
                      ->capture_default_str()
                      ->check(int_in(1, 256));
}

// The screen before a candidate's gate run, the baseline cache across runs, and when a silent worker is lost.
void add_run_screen_options(CLI::App* cmd, const RunRequestPtr& req) {
  cmd->add_option(
         "--screen-min-speedup", req->screen_min_speedup,
         "Drop a candidate whose stage-timing estimate cannot reach this speedup before spending full clips on it "
         "(0: off)")
      ->default_str(
          "1.5 (the smallest tier) for wan22-ti2v-5b at the official configuration; 0 at a reduced one and for "
          "wan22-tiny")
      ->check(number_in(0, 100));
  cmd->add_option("--screen-slack", req->screen_slack, "Noise allowance of the screen's estimate (0.10: 10%)")
      ->capture_default_str()
      ->check(number_in(0, 10));
  cmd->add_option("--screen-forwards", req->screen_forwards, "Timed transformer forwards per side in a screen")
      ->capture_default_str()
      ->check(int_in(1, 100));
  cmd->add_option("--baseline-cache", req->baseline_cache,
                  "Folder of baseline clips and verdicts reused across runs (keyed by weights, build, device, "
                  "manifest, prompts, seed)")
      ->default_str("on a GPU ~/.cache/autooptim/baseline-cache (every run of this machine), else OUT/baseline-cache");
  cmd->add_option("--worker-dead-after", req->worker_dead_after_s,
                  "Seconds of heartbeat silence after which a worker's requests are re-queued")
      ->capture_default_str()
      ->check(number_in(1, 86400));
}

// Slurm (docs/slurm.md): the workers as a job array; the orchestrator and executors stay here.
void add_run_launcher_options(CLI::App* cmd, const RunRequestPtr& req) {
  cmd->add_option("--launcher", req->launcher,
                  "Where the workers run: local (this host) or slurm (a job array of --workers tasks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "slurm"}));
  auto* slurm_opts = cmd->add_option_group("slurm", "With --launcher slurm");
  slurm_opts->add_option("--partition", req->slurm_partition,
                         "Slurm partition of the worker tasks (default: the cluster's)");
  slurm_opts->add_option("--gpus-per-worker", req->gpus_per_worker, "GPUs per worker task (--gres=gpu:G)")
      ->default_str("1 with --device cuda, 0 on the CPU")
      ->check(int_in(0, 64));
  slurm_opts->add_option("--cpus-per-worker", req->cpus_per_worker, "CPUs per worker task (and a CPU worker's threads)")
      ->capture_default_str()
      ->check(int_in(1, 1024));
  slurm_opts->add_option("--slurm-time", req->slurm_time, "Time limit of the worker tasks (--time, e.g. 04:00:00)");
  slurm_opts
      ->add_option("--sbatch-arg", req->sbatch_args,
                   "One more sbatch option for the worker tasks, e.g. --sbatch-arg=--account=proj (repeatable)")
      ->allow_extra_args(false);
  slurm_opts
      ->add_option("--slurm-start-timeout", req->slurm_start_timeout_s,
                   "Seconds to wait for the first worker (queue time included)")
      ->capture_default_str()
      ->check(number_in(1, 604800));
}

// The run's budgets, and --resume.
void add_run_budget_options(CLI::App* cmd, const RunRequestPtr& req) {
  // Defaults that depend on the model are shown for both (the tiny model's small run fits a CI machine).
  cmd->add_option("--budget-trials", req->budget_trials,
                  "Gate runs at most (one is kept back per tier winner awaiting its held-out check)")
      ->default_str("10 for wan22-tiny, 40 for wan22-ti2v-5b")
      ->check(int_in(1, 1000000));
  cmd->add_option("--budget-minutes", req->budget_minutes,
                  "Wall-clock budget (a gate run's worth is kept back per tier winner awaiting its held-out check)")
      ->default_str("6 for wan22-tiny, 60 for wan22-ti2v-5b")
      ->check(number_in(0, 525600, true));
  cmd->add_option("--executor-trials", req->executor_trials, "Measurements each executor may make")
      ->default_str("5 for wan22-tiny, 8 for wan22-ti2v-5b")
      ->check(int_in(1, 1000000));
  cmd->add_flag("--resume", req->resume, "Continue an interrupted run from its ledger");
}

// The gate: its splits and prompts, timing and quality tolerances; --fail-if-no-tier for CI.
void add_run_gate_options(CLI::App* cmd, const RunRequestPtr& req, RunOptionHandles& given) {
  cmd->add_option("--split", req->split, "Visible split the candidates are gated on")
      ->capture_default_str()
      ->check(CLI::IsMember(gates::visible_splits()));
  cmd->add_option("--heldout-split", req->heldout_split, "Held-out split every tier candidate is checked on")
      ->capture_default_str()
      ->check(CLI::IsMember(gates::heldout_splits()));
  cmd->add_option("--prompts-dir", req->prompts_dir, "Folder of visible.jsonl and heldout.jsonl")
      ->default_str("prompts/ here, next to the binary, or installed");
  cmd->add_option("--manifests-dir", req->manifests_dir,
                  "Folder of manifests/<model>/ (its baseline.json must be the pinned baseline's copy)")
      ->default_str("manifests/ here, next to the binary, or installed");
  cmd->add_option("--repeats", req->gate.timing_repeats, "Interleaved timed pairs per gate run")
      ->default_str("2 for wan22-tiny, 3 for wan22-ti2v-5b")
      ->check(int_in(1, 1000));
  cmd->add_option("--max-prompts", req->gate.max_prompts, "Prompts per split at most (0 = all)")
      ->default_str("2 for wan22-tiny, 0 for wan22-ti2v-5b")
      ->check(int_in(0, 1000000));
  given.fail_tier =
      cmd->add_option("--fail-if-no-tier", req->fail_if_no_tier,
                      "CI: exit 1 unless a tier was reached (BUCKET: unless that one: 1.5x, 2x, 3x or 4x)")
          ->expected(0, 1)
          ->type_name("[BUCKET]")
          ->check(CLI::IsMember({"", "any", "1.5x", "2x", "3x", "4x"}));
  cmd->add_option("--min-psnr", req->gate.min_psnr, "Quality tolerance of lossy candidates (dB)")
      ->capture_default_str()
      ->check(number_in(0, 200));
  cmd->add_option("--min-ssim", req->gate.min_ssim, "Quality tolerance of lossy candidates (SSIM)")
      ->capture_default_str()
      ->check(number_in(0, 1));
  add_gate_judgement_options(cmd, req->gate);
}

// The deploy check of each tier and the held-out confirmation of its winner.
void add_run_deploy_options(CLI::App* cmd, const RunRequestPtr& req) {
  cmd->add_flag(
      "--no-deploy-check", [req](int64_t) { req->deploy_check = false; },
      "Deliver the tiers without generating them again through generate --manifest (the report says they were not "
      "checked)");
  cmd->add_option("--heldout-max-prompts", req->heldout_max_prompts,
                  "Held-out prompts a tier's winner is confirmed on (0: the whole split)")
      ->capture_default_str()
      ->check(int_in(0, 1000000));
  cmd->add_option("--deploy-pairs", req->deploy_pairs,
                  "Alternating baseline/tier generate processes of each tier's deploy check")
      ->capture_default_str()
      ->check(int_in(1, 100));
}

// A configuration off the official one: measured, but no tier can be won.
void add_run_reduced_config_options(CLI::App* cmd, const RunRequestPtr& req) {
  cmd->add_option("--frames", req->frames, "Reduced configuration: frames (no tier can be won)")->check(frames_count());
  cmd->add_option("--steps", req->steps, "Reduced configuration: steps (no tier can be won)")->check(step_count());
  cmd->add_option("--height", req->height, "Reduced configuration: height (no tier can be won)")->check(pixel_size());
  cmd->add_option("--width", req->width, "Reduced configuration: width (no tier can be won)")->check(pixel_size());
}

void group_run_options(CLI::App* cmd) {
  // The help lists the options by what they are for, not in one list of forty.
  const std::vector<std::pair<const char*, std::vector<const char*>>> groups = {
      {"Output and budget",
       {"--out", "--plan", "--resume", "--budget-trials", "--budget-minutes", "--executor-trials",
        "--fail-if-no-tier"}},
      {"Prompts and gate",
       {"--split", "--heldout-split", "--heldout-max-prompts", "--prompts-dir", "--manifests-dir", "--repeats",
        "--max-prompts", "--min-psnr", "--min-ssim", "--object-check", "--no-precision-floor", "--full-gate",
        "--baseline-cache"}},
      {"Screening", {"--screen-min-speedup", "--screen-slack", "--screen-forwards"}},
      {"Workers", {"--gpus", "--workers", "--worker-dead-after", "--launcher"}},
      {"Deploy check", {"--no-deploy-check", "--deploy-pairs"}},
      {"Reduced configuration (no tier can be won)", {"--frames", "--steps", "--height", "--width"}}};
  for (const auto& [group, names] : groups)
    for (const char* n : names) cmd->get_option(n)->group(group);
}

// The request completed from the options: --out or --plan, the data folders, the model's own defaults.
void complete_run_request(const std::shared_ptr<ModelArgs>& model, const RunRequestPtr& req, CLI::App* cmd,
                          const RunOptionHandles& given) {
  if (given.out->count() == 0 && !req->plan) throw CLI::RequiredError("--out");
  if (req->plan && req->out_dir.empty()) req->out_dir = "(plan)";
  if (given.fail_tier->count() > 0 && req->fail_if_no_tier.empty()) req->fail_if_no_tier = "any";
  const models::ModelFacts& facts = model->facts();
  if (model->tiny_trained() && cmd->count("--prompts-dir") == 0)
    req->prompts_dir = find_data_dir(facts.own_prompts->dir, "", false);
  else
    req->prompts_dir = find_data_dir("prompts", req->prompts_dir, cmd->count("--prompts-dir") > 0);
  req->manifests_dir = find_data_dir("manifests", req->manifests_dir, cmd->count("--manifests-dir") > 0);
  req->command_line = command_line();
  // The model's own defaults (the model table's; the embedded model's fit a 2-core CI machine in
  // minutes), unless the user says otherwise.
  const models::RunDefaults& d = facts.run;
  if (cmd->count("--budget-minutes") == 0) req->budget_minutes = d.budget_minutes;
  if (cmd->count("--budget-trials") == 0) req->budget_trials = d.budget_trials;
  if (cmd->count("--executor-trials") == 0) req->executor_trials = d.executor_trials;
  if (cmd->count("--max-prompts") == 0) req->gate.max_prompts = d.max_prompts;
  if (cmd->count("--repeats") == 0) req->gate.timing_repeats = d.timing_repeats;
  if (cmd->count("--screen-min-speedup") == 0 && d.screen_min_speedup) req->screen_min_speedup = *d.screen_min_speedup;
  req->load = model->request();
}

// The GPUs and CPU cores of this host that the run may plan workers on.
void count_host_devices(const RunRequestPtr& req) {
  req->gpu_count = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  req->cpu_cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                               : static_cast<int>(std::thread::hardware_concurrency());
  if (req->cpu_cores < 1) req->cpu_cores = 1;
}

// Where the workers run, checked against the options that place them: Slurm tasks, one worker per GPU, or
// CPU workers.
void check_worker_placement(CLI::App* cmd, const RunRequestPtr& req, const RunOptionHandles& given) {
  if (req->launcher == "slurm") {
    // Slurm gives each task its devices: --workers tasks, --gpus-per-worker GPUs each.
    if (given.gpus->count() > 0)
      throw Error("--gpus " + req->gpus + ": with --launcher slurm use --workers N and --gpus-per-worker G");
    const bool cuda = req->load.precision.device.is_cuda();
    if (cmd->count("--gpus-per-worker") == 0) req->gpus_per_worker = cuda ? 1 : 0;
    if (!cuda && req->gpus_per_worker > 0)
      throw Error("--gpus-per-worker " + std::to_string(req->gpus_per_worker) +
                  ": the workers' device is the CPU (use --device cuda for GPU workers)");
    if (cuda && req->gpus_per_worker == 0)
      throw Error("--gpus-per-worker 0 with --device cuda: a GPU worker needs a GPU");
  } else {
    for (const char* o : {"--partition", "--gpus-per-worker", "--cpus-per-worker", "--slurm-time", "--sbatch-arg",
                          "--slurm-start-timeout"})
      if (cmd->count(o) > 0) throw Error(std::string(o) + " is for --launcher slurm");
  }
  if (req->launcher == "slurm") {
    // Nothing of this host's devices is planned: the tasks get theirs from Slurm.
  } else if (given.gpus->count() > 0 && given.workers->count() > 0) {
    throw Error("--gpus and --workers: use --gpus on a GPU (one worker per GPU), --workers on the CPU");
  } else if (req->load.precision.device.is_cuda()) {
    if (given.workers->count() > 0)
      throw Error("--workers " + std::to_string(req->workers) +
                  ": on a GPU use --gpus all|0,1,... (one worker per GPU)");
    if (req->gpus.empty()) req->gpus = "0";
  } else if (!req->gpus.empty()) {
    throw Error("--gpus " + req->gpus + ": the run's device is the CPU (" +
                (runtime::built_with_cuda() ? std::string("--device cuda uses the GPUs") : no_cuda_build_text()) +
                "); use --workers N");
  }
}

// What `autooptim run` does once its options are parsed: the request completed and checked, the run, and
// where its report is.
void run_orchestrator(const std::shared_ptr<ModelArgs>& model, const RunRequestPtr& req, CLI::App* cmd,
                      const RunOptionHandles& given, const RunAgentArgs& agents) {
  complete_run_request(model, req, cmd, given);
  complete_run_agents(*req, agents, cmd);
  count_host_devices(req);
  check_worker_placement(cmd, req, given);
  // FP8 GEMMs exist only on GPUs: the quantisation family's executor runs there.
  if (req->load.precision.device.is_cuda() &&
      std::find(req->families.begin(), req->families.end(), "quant") == req->families.end())
    req->families.push_back("quant");
  req->model_cli = model_cli(*model);
  const auto outcome = orchestrator::run(*req);
  if (!req->plan) {
    std::printf("report: %s\n", outcome.report_path.c_str());
    std::printf("        %s\n", (fs::path(outcome.report_path).parent_path() / "report.html").c_str());
  }
  for (const auto& w : outcome.warnings) log::warn(w);
  // The reason for a non-zero exit goes to stderr whatever the log level: CI shows it.
  for (const auto& p : outcome.problems)
    std::fprintf(stderr, "autooptim: %s: %s\n", outcome.exit_code == 1 ? "check failed" : "error", p.c_str());
  exit_status() = outcome.exit_code;
}

}  // namespace

void add_run(CLI::App& app) {
  auto model = std::make_shared<ModelArgs>();
  auto req = std::make_shared<orchestrator::RunRequest>();
  auto* cmd =
      app.add_subcommand("run", "Search every technique family, gate the proposals, compose, and report the tiers");
  model->add_to(cmd);
  // The options in the order --help lists them within each group.
  RunOptionHandles given;
  add_run_output_options(cmd, req, given);
  add_run_screen_options(cmd, req);
  add_run_launcher_options(cmd, req);
  add_run_budget_options(cmd, req);
  add_run_gate_options(cmd, req, given);
  add_run_deploy_options(cmd, req);
  add_run_reduced_config_options(cmd, req);
  auto agents = std::make_shared<RunAgentArgs>();
  add_run_agent_options(cmd, req, agents);
  group_run_options(cmd);
  // Every option above can also come from a file: `--config run.toml` with lines like `budget-minutes = 90`
  // or `agent = ["cache=claude -p ..."]`; the command line wins over the file.
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config, "A run configuration file (TOML: option = value; the command line wins)");
  cmd->callback([model, req, cmd, given, agents, config] {
    if (!config->empty()) apply_run_config(cmd, *config);
    run_orchestrator(model, req, cmd, given, *agents);
  });
}

void add_executor(CLI::App& app) {
  auto model = std::make_shared<ModelArgs>();
  auto req = std::make_shared<executors::ExecutorRequest>();
  auto* cmd = app.add_subcommand("executor", "One technique family's search process (spawned by run)");
  model->add_to(cmd);
  cmd->add_option("--family", req->family, "kernel, cache, sparse or quant (an agent's: from --agent-family)")
      ->check(CLI::IsMember({"kernel", "cache", "sparse", "quant"}));
  auto agent = std::make_shared<executors::AgentSpec>();
  add_executor_agent_options(cmd, agent);
  cmd->add_option("--min-ssim", req->min_ssim)->capture_default_str()->check(number_in(0, 1));
  cmd->add_option("--base", req->base_manifest, "Baseline manifest")->required()->check(CLI::ExistingFile);
  cmd->add_option("--prompts", req->prompts_file, "Visible prompts (JSON lines)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--outbox", req->outbox, "Folder the proposals are written to")->required();
  cmd->add_option("--budget-trials", req->budget_trials)->capture_default_str()->check(int_in(1, 1000000));
  cmd->add_option("--min-psnr", req->min_psnr)->capture_default_str()->check(number_in(0, 200));
  cmd->add_option("--device-lock", req->device_lock,
                  "Unused (the workers time one request at a time); accepted for old command lines");
  cmd->add_option("--serve", req->serve_dir, "Run folder whose workers measure the trials (default: a private worker)");
  cmd->callback([model, req, agent] {
    if (!agent->family.empty()) {
      if (agent->command.empty()) throw Error("--agent-family needs --agent-command");
      if (agent->brief_template.empty() || agent->agent_dir.empty())
        throw Error("an agent executor needs --agent-brief and --agent-dir");
      if (!req->family.empty() && req->family != agent->manifest_family())
        throw Error("--family " + req->family + " and --agent-family " + agent->family + " disagree");
      req->family = agent->manifest_family();
      req->agent = *agent;
    } else if (req->family.empty()) {
      throw Error("--family is required (or --agent-family with --agent-command)");
    }
    req->load = model->request();
    req->worker_cli = model_cli(*model);
    const int n = executors::run_executor(*req);
    std::printf("%d manifests proposed in %s\n", n, req->outbox.c_str());
  });
}

}  // namespace autooptim::app
