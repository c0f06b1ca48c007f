#pragma once
// The master process of `autooptim run`: runs the baseline, spawns one executor process per family,
// gates what they propose, composes the survivors across families, checks every tier candidate on the
// held-out prompts, and writes the report. Resumable from its ledger.
#include <optional>
#include <string>
#include <vector>

#include "gates/gate.h"
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
  int64_t budget_trials = 40;     // gate runs at most
  double budget_minutes = 60;     // wall-clock budget for the whole run
  int64_t executor_trials = 8;    // trials each executor may measure
  bool resume = false;
  std::vector<std::string> families = {"kernel", "cache", "sparse"};
  // Reduced configuration (0 = the baseline manifest's): for quick GPU runs; such a run can never win
  // a tier (the official-config gate), and the report says so.
  int64_t frames = 0, steps = 0, height = 0, width = 0;
  gates::GateSettings gate;
  // CI: exit 1 when no tier was reached ("any") or when this bucket ("1.5x", "2x", "3x", "4x") was
  // not (empty: off).
  std::string fail_if_no_tier;
  std::vector<std::string> command_line;  // as typed, for the report's environment block
};

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

// The flags of a composition: each part's flags that differ from the baseline's (resolved) flags,
// merged; null when two parts set one flag differently. dtype and cpu_threads are never taken over.
nlohmann::json compose_flags(const nlohmann::json& base_flags, const std::vector<nlohmann::json>& parts);

// The composition of candidates of different families as a new candidate manifest (id
// <model>/composite/<a>-plus-<b>, parents, lossless only if every part is); nullopt when the parts
// conflict. Throws Error if the result is not a valid manifest.
std::optional<gates::Manifest> compose_manifest(const gates::Manifest& base, const std::vector<const gates::Manifest*>& parts);

// Refuses (Error naming the option) a request whose numbers or splits are out of range: budgets that
// are not positive, NaN or negative tolerances, a held-out split to gate candidates on, sizes that are
// not multiples of 32, frames that are not 4k+1. run() calls it before anything else.
void validate(const RunRequest& req);

// The whole job. Holds an exclusive lock on OUT/run.lock for the whole run. SIGINT/SIGTERM during it stop the executors (which share the run's process group and
// die with it), end the gate run in progress without a verdict, and write the report of what was done
// before returning (interrupted); --resume continues from the ledger and the outboxes.
RunOutcome run(const RunRequest& req);

}  // namespace autooptim::orchestrator
