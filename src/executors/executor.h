#pragma once
// Executors: one process per technique family. Each explores its family's search space on the visible
// prompts only, measuring candidates against the baseline itself, and proposes manifests by writing
// them to its outbox. It never decides acceptance: that is the gates' job.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "executors/agent_spec.h"
#include "gates/manifest.h"
#include "gates/prompts.h"
#include "runtime/models.h"
#include "workers/trial_result.h"

namespace autooptim::executors {

struct ExecutorRequest {
  std::string family;         // kernel | cache | sparse | quant: the manifests it proposes
  AgentSpec agent;            // set: an agent searches this family in a sandbox (executors/agent_host.h)
  runtime::LoadRequest load;  // the model (its name; the workers hold it)
  // The run folder whose workers measure the trials (docs/workers.md). Empty: the executor starts one
  // private worker of its own (worker_cli: its model options) in a temporary folder.
  std::string serve_dir;
  std::vector<std::string> worker_cli;
  std::string base_manifest;   // path of the baseline manifest (its config is the run's config)
  std::string prompts_file;    // visible prompts (JSON lines); held-out prompts never reach here
  std::string outbox;          // manifests are written here, one file each, atomically
  int64_t budget_trials = 12;  // candidate measurements at most
  double min_psnr = 30.0;      // the quality floor a proposal is expected to clear (gates decide)
  double min_ssim = 0.0;       // the SSIM floor (for an agent's brief)
  // Unused since the workers (one request at a time per device) time the trials: accepted for old command lines.
  std::string device_lock;
  // Its name in the run (its outbox, its client id at the workers): the family, or "agent-<family>".
  std::string executor_name() const { return agent.empty() ? family : agent.name(); }
};

// One measured trial (workers/trial_result.h: the worker measures it, the executor reads it).
using Trial = workers::TrialResult;

// The order in which the cache executor tries a policy's n search points (listed from conservative to
// aggressive): the middle first, then outwards, the more aggressive neighbour first; e.g. n = 6 gives
// 2 3 1 4 0 5. A short budget measures one point per policy, and the most conservative one skips nothing
// on a trained model (EasyCache at 0.02 on the trained wan22-tiny, docs/journal/2026-12-04.md).
std::vector<size_t> middle_out(size_t n);

// The pinned baseline manifest at `path` (Error unless it is one).
gates::Manifest load_baseline(const std::string& path);
// The visible prompts of `path`, smoke prompts first; Error naming a held-out prompt found there.
std::vector<gates::Prompt> load_visible_prompts(const std::string& path);

// Runs the family's search (an agent's when req.agent is set); returns the number of manifests proposed. Trials are
// logged to <outbox>/trials.jsonl as they finish.
int run_executor(const ExecutorRequest& req);

}  // namespace autooptim::executors
