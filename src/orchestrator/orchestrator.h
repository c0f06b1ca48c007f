#pragma once
// The master process of `autooptim run`: runs the baseline, spawns one executor process per family,
// gates what they propose, composes the survivors across families, checks every tier candidate on the
// held-out prompts, and writes the report. Resumable from its ledger.
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gates/gate.h"
#include "gates/gate_plan.h"
#include "orchestrator/gate_record.h"
#include "runtime/models.h"

namespace autooptim::orchestrator {

struct RunRequest {
  runtime::LoadRequest load;
  std::vector<std::string> model_cli;  // the model options, forwarded to the executor processes
  std::string out_dir;
  std::string prompts_dir = "prompts";
  std::string manifests_dir = "manifests";
  std::string split = "val";
  std::string heldout_split = "heldout16";
  int64_t budget_trials = 40;   // gate runs at most
  double budget_minutes = 60;   // wall-clock budget for the whole run
  int64_t executor_trials = 8;  // trials each executor may measure
  bool resume = false;
  std::vector<std::string> families = {"kernel", "cache", "sparse"};
  // Agent executors (docs/agents.md): one per --agent FAMILY=COMMAND, each in a sandbox, beside its family's
  // built-in searcher or, with agent_only, instead of it. Its executor is named "agent-<family>".
  struct Agent {
    std::string family, command;
  };
  std::vector<Agent> agents;
  bool agent_only = false;
  bool agent_unsandboxed = false;        // run agents without a sandbox where none can be made (warned)
  std::string agent_network;             // HOST:PORT the agents may reach ("" none)
  std::vector<std::string> agent_env;    // host variables passed into the sandboxes
  std::vector<std::string> agent_binds;  // host paths bound read-only at the same path
  std::string agent_briefs_dir;          // the brief templates (prompts/agents)
  // Reduced configuration (0 = the baseline manifest's): for quick GPU runs; such a run can never win
  // a tier (the official-config gate), and the report says so.
  int64_t frames = 0, steps = 0, height = 0, width = 0;
  gates::GateSettings gate;
  // CI: exit 1 when no tier was reached ("any") or when this bucket ("1.5x", "2x", "3x", "4x") was
  // not (empty: off).
  std::string fail_if_no_tier;
  std::vector<std::string> command_line;  // as typed, for the report's environment block
  // The deploy check (docs/deploy.md): each tier through `generate --manifest` against the baseline through
  // the same path, in `deploy_pairs` alternating pairs of processes; a tier that does not reproduce is not delivered.
  bool deploy_check = true;
  // Prompts of the held-out split a tier's winner is confirmed on (0: the whole split).
  int64_t heldout_max_prompts = 0;
  int64_t deploy_pairs = 2;

  // Workers (docs/workers.md): one process per device holds the model; everything else sends requests.
  std::string gpus;                 // --gpus all|0,1,...: one worker per GPU (empty: one on the run's device)
  int64_t workers = 1;              // --workers N: CPU workers (the cores shared out)
  int64_t gpu_count = 0;            // GPUs this process sees (filled by the CLI)
  int64_t cpu_cores = 1;            // cores this process may use (filled by the CLI)
  double worker_dead_after_s = 30;  // heartbeat silence after which a worker's requests are re-queued
  // Staged evaluation: a candidate is screened by stage timing first and dropped when its optimistic
  // estimated speedup, with screen_slack for noise, stays below screen_min_speedup. -1: the smallest
  // tier (1.5x) at the official configuration, off at a reduced one. 0: off.
  double screen_min_speedup = -1;
  double screen_slack = 0.10;
  int64_t screen_forwards = 3;
  // Baseline clips and the baseline's own gate verdict, reused across runs (keyed by the weights'
  // identity, the build, the device, the baseline manifest, the prompts and the seed). Empty: OUT/baseline-cache.
  std::string baseline_cache;
  // --plan: calibrate (one forward, one decode on one worker), print the estimate and exit; exit 2 when
  // the budget cannot gate one candidate.
  bool plan = false;

  // Where the workers run (orchestrator/launcher.h): "local" on this host, or "slurm": `workers` tasks of
  // a job array (docs/slurm.md), each with gpus_per_worker GPUs and cpus_per_worker CPUs.
  std::string launcher = "local";
  std::string slurm_partition;           // --partition (empty: the cluster's default)
  int64_t gpus_per_worker = 0;           // --gpus-per-worker
  int64_t cpus_per_worker = 1;           // --cpus-per-worker
  std::string slurm_time;                // --slurm-time (empty: the partition's limit)
  std::vector<std::string> sbatch_args;  // --sbatch-arg, each passed as an #SBATCH line
  double slurm_start_timeout_s = 1800;   // waiting for the first Slurm worker to be ready (queue time included)
};

// What --plan estimates from a calibration (seconds of device time).
struct PlanEstimate {
  double load_s = 0, clip_s = 0, forward_s = 0, decode_s = 0, text_s = 0;
  double gate_s = 0;     // one candidate's gate run, the split's baseline outputs cached, at the baseline's speed
  double gate_2x_s = 0;  // the same for a candidate twice as fast
  int64_t gate_generations = 0;
  gates::ClipCost cost;  // a clip and a step at the baseline's speed
  double screen_s = 0;   // one screen
  double trial_s = 0;    // one executor trial
  double baseline_gate_s = 0, exploration_s = 0, gating_s = 0, total_device_s = 0, wall_s = 0;
  double min_budget_s = 0;         // the least budget that gates one candidate
  double min_budget_cached_s = 0;  // ... when the baseline's gate is cached from an earlier run
  double min_budget_2x_s = 0;      // both for a candidate at 2x
  double min_budget_2x_cached_s = 0;
  int64_t workers = 1, gates_fit = 0;
  int64_t gates_fit_2x = 0;  // the candidate gates the budget holds when they run at 2x
  bool enough = false;
  std::string why;  // when not enough
};
// The estimate of a run from a calibration result (the worker's "calibrate" response) at the run's
// configuration (unknown: a warm-up is priced as a whole clip).
PlanEstimate estimate_plan(const RunRequest& req, const nlohmann::json& calibration, int64_t prompts_in_split,
                           const std::optional<gates::RunConfig>& config = std::nullopt);

// What a run ended with: the report's path, the exit status and why it is not 0.
struct RunOutcome {
  std::string report_path;
  int exit_code = 0;                  // 0 ok; 1 --fail-if-no-tier not met; 2 nothing measured; 128+signal interrupted
  std::vector<std::string> problems;  // the reasons for a non-zero exit, one sentence each
  std::vector<std::string> warnings;  // worth a look, not a failure (one executor of three failed)
  int signal = 0;                     // SIGINT/SIGTERM that interrupted the run (0: none)
};

// Judges a finished report object (see run()): every executor failed, the baseline was not measured,
// nothing was gated -> 2; the bucket of fail_if_no_tier not reached -> 1; report["interrupted"] -> 128+signal.
RunOutcome judge_run(const nlohmann::json& report, const std::string& fail_if_no_tier);

// The tier winners still to be checked on the held-out split: per bucket the accepted verdict at or above
// its speedup with the best PSNR, counted once each, whose manifest hash is not in `confirmed`. While
// candidates are gated, each keeps one gate run of --budget-trials back.
int64_t heldout_pending(const std::vector<GateRecord>& verdicts, const std::set<std::string>& confirmed);

// Seconds of the budget kept back for the held-out checks while candidates are still being gated: each
// tier's current winner (per bucket, the accepted verdict at or above its speedup with the best PSNR)
// whose manifest hash is not in `confirmed` (held-out verdict known) costs one gate run, `per_gate_s`
// (the mean so far) with a quarter for noise, spread over `workers`.
double heldout_reserve_s(const std::vector<GateRecord>& verdicts, const std::set<std::string>& confirmed,
                         double per_gate_s, int64_t workers);

// The flags of a composition: each part's flags that differ from the baseline's (resolved) flags,
// merged; null when two parts set one flag differently. dtype and cpu_threads are never taken over.
nlohmann::json compose_flags(const nlohmann::json& base_flags, const std::vector<nlohmann::json>& parts);

// The composition of candidates of different families as a new candidate manifest (id
// <model>/composite/<a>-plus-<b>, parents, lossless only if every part is); nullopt when the parts
// conflict. Throws Error if the result is not a valid manifest.
std::optional<gates::Manifest> compose_manifest(const gates::Manifest& base,
                                                const std::vector<const gates::Manifest*>& parts);

// Refuses (Error naming the option) a request whose numbers or splits are out of range: budgets that
// are not positive, NaN or negative tolerances, a held-out split to gate candidates on, sizes that are
// not multiples of 32, frames that are not 4k+1. run() calls it before anything else.
void validate(const RunRequest& req);

// The whole job. Holds an exclusive lock on OUT/run.lock for the whole run. SIGINT/SIGTERM during it stop the executors
// (which share the run's process group and die with it), end the gate run in progress without a verdict, and write the
// report of what was done before returning (interrupted); --resume continues from the ledger and the outboxes.
RunOutcome run(const RunRequest& req);

}  // namespace autooptim::orchestrator
