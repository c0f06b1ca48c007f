#pragma once
// Executors: one process per technique family. Each explores its family's search space on the visible
// prompts only, measuring candidates against the baseline itself, and proposes manifests by writing
// them to its outbox. It never decides acceptance: that is the gates' job.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/manifest.h"
#include "gates/prompts.h"
#include "runtime/models.h"

namespace autooptim::executors {

struct ExecutorRequest {
  std::string family;               // kernel | cache | sparse
  runtime::LoadRequest load;        // the model (its name; the workers hold it)
  // The run folder whose workers measure the trials (docs/workers.md). Empty: the executor starts one
  // private worker of its own (worker_cli: its model options) in a temporary folder.
  std::string serve_dir;
  std::vector<std::string> worker_cli;
  std::string base_manifest;        // path of the baseline manifest (its config is the run's config)
  std::string prompts_file;         // visible prompts (JSON lines); held-out prompts never reach here
  std::string outbox;               // manifests are written here, one file each, atomically
  int64_t budget_trials = 12;       // candidate measurements at most
  double min_psnr = 30.0;           // the quality floor a proposal is expected to clear (gates decide)
  // Unused since the workers (one request at a time per device) time the trials: accepted for old command lines.
  std::string device_lock;
};

// One measured trial: the candidate's flags, the prompts it ran on, its speedup and quality.
struct Trial {
  nlohmann::json flags;
  std::string label;
  int64_t prompts = 0;
  double baseline_s = 0, candidate_s = 0, speedup = 0, psnr_min = 0;
  // Measured on the candidate runs (mean over prompts), -1 where not counted: the cache family's
  // forward-skip ratio (cache.skip_ratio) and the achieved attention density (sparse.attention.density).
  double skip_ratio = -1, density = -1;
  // What the harness's authenticity check would say of the candidate runs' engagement counters
  // (a switch that did nothing): such a trial is logged but never proposed.
  std::vector<std::string> not_engaged;
  bool engaged() const { return not_engaged.empty(); }
  nlohmann::json to_json() const;
  static Trial from_json(const nlohmann::json& j);
};

// The order in which the cache executor tries a policy's n search points (listed from conservative to
// aggressive): the middle first, then outwards, the more aggressive neighbour first; e.g. n = 6 gives
// 2 3 1 4 0 5. A short budget measures one point per policy, and the most conservative one skips nothing
// on a trained model (EasyCache at 0.02 on the trained wan22-tiny, docs/benchmarks.md 2026-12-04).
std::vector<size_t> middle_out(size_t n);

// Runs the family's search; returns the number of manifests proposed. Trials are logged to
// <outbox>/trials.jsonl as they finish.
int run_executor(const ExecutorRequest& req);

}  // namespace autooptim::executors
