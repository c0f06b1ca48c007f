#pragma once
// What the phases of one `autooptim run` share (orchestrator/phases/): the request, the run folder, the
// workers, the verdicts so far, the candidates and the counters the report reads. run() fills it phase by
// phase; a test builds one by hand to check a phase on its own.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/atomic_file.h"
#include "gates/gate.h"
#include "gates/ledger.h"
#include "gates/prompts.h"
#include "orchestrator/gate_record.h"
#include "orchestrator/launcher.h"
#include "orchestrator/orchestrator.h"
#include "orchestrator/progress.h"
#include "workers/protocol.h"

namespace autooptim::orchestrator {

// A manifest on one split: (manifest hash, split name).
using SplitKey = std::pair<std::string, std::string>;

// The tier buckets, smallest first: name and the speedup it needs.
const std::vector<std::pair<std::string, double>>& tier_buckets();

// A manifest id as a folder name ('/' -> '_').
std::string slug(const std::string& id);

const char* signal_name(int sig);

// "interrupted by SIGINT <when>", naming the signal received (base::StopSignals).
std::string interrupted_by(const std::string& when);

// The gate environment a worker registered (build, weights hash, device, dtype; gates::gate_environment),
// and whether a ledger row was decided in it: resumed verdicts and cached baselines must match it.
nlohmann::json gate_environment_of(const workers::WorkerInfo& w);
bool same_gate_environment(const nlohmann::json& row, const workers::WorkerInfo& w);

struct Candidate {
  gates::Manifest m;
  std::string hash;
  std::optional<GateRecord> val;      // verdict on the gating split; none: the budget left it ungated
  std::optional<GateRecord> heldout;  // verdict on the held-out split (tier candidates only)
  bool accepted() const { return val && val->accepted; }
  // Passed every gate but the official-config one: what a reduced-configuration run can show.
  bool survived_reduced() const { return val && val->survived_reduced(); }
  double speedup() const { return val ? val->speedup : 0.0; }
  double psnr() const { return val ? val->psnr : 0.0; }
  double ssim() const { return val ? val->ssim : 0.0; }
};

// The tier rule between candidates: better quality first, then more speed (an ungated one ranks as 0 for both).
bool ranks_above(const Candidate& a, const Candidate& b);

// The staged evaluation of one manifest on one split: a screen (stage timing) first where asked, then
// the gate run; both are requests to the workers.
struct Job {
  gates::Manifest m;
  std::string split, phase, hash;
  bool screen = false;        // screen before gating
  nlohmann::json skip_ratio;  // measured by the executor (a step cache), null when unknown
  std::string request;        // id of the request in flight ("" none)
  bool screening = false;     // the request in flight is the screen
  bool done = false;
  std::optional<GateRecord> verdict;  // none: not gated (reason in RunState::not_gated)
  nlohmann::json screen_result;
  double screen_s = 0, gate_s = 0;
};

// Wall time and gate runs of one phase, for the report's "phases".
struct PhaseTotals {
  double wall_s = 0;
  int64_t gate_runs = 0;
};

struct RunState {
  // `base`: the pinned baseline at the run's configuration; `prompts`: every split, held-out ones included.
  RunState(const RunRequest& request, gates::Manifest base, gates::PromptSet prompts);

  const RunRequest& req;
  const std::filesystem::path out;
  const Clock::time_point start;
  const std::string started_at;
  Progress progress;
  const gates::Manifest base;
  const bool official;  // the official configuration: only there can a tier be won
  const gates::PromptSet prompts;
  const bool slurm;                        // the workers are Slurm tasks
  std::vector<workers::WorkerSlot> slots;  // this host's workers (none under Slurm)

  // The run folder and its workers (phases/start.cpp).
  std::filesystem::path base_path, visible_path;
  std::optional<gates::FolderLock> lock;
  std::unique_ptr<Launcher> launcher;
  std::optional<workers::Client> client;
  workers::WorkerInfo first_worker;
  std::optional<gates::Ledger> ledger;

  // How candidates are gated (phases/start.cpp).
  gates::GateSettings gs;
  std::string cache;                                // the cross-run cache's root (absolute)
  nlohmann::json gate_settings;                     // gs as the workers read it
  std::map<std::string, std::string> plugin_files;  // sha256 -> the run's copy of a plugin an agent handed over
  int64_t split_all = 0, heldout_all = 0;           // prompts in the split and the held-out split
  int64_t split_used = 0, heldout_used = 0;         // of which a gate judges
  std::vector<gates::Prompt> split_prompts;         // the prompts a gate on the split judges
  double screen_min = 0;                            // a screen's estimate below this drops the candidate (0: no screen)
  nlohmann::json categories = nlohmann::json::object();    // prompt id -> category
  nlohmann::json prompt_texts = nlohmann::json::object();  // the visible prompts' words

  // Verdicts: from the ledger (resume) and the gate runs of this run, and why a manifest got none.
  std::map<SplitKey, GateRecord> done;
  std::map<SplitKey, std::string> not_gated;
  std::map<std::string, nlohmann::json> screen_of;               // manifest hash -> screen result
  std::map<std::string, std::pair<double, double>> device_s_of;  // manifest hash -> (screen_s, gate_s)
  std::vector<std::string> worker_events;                        // deaths and restarts
  int64_t gate_runs = 0, screens = 0, screened_out = 0, gates_finished = 0;
  double best = 1.0, gating_s = 0, screening_s = 0;

  // The baseline (phases/baseline.cpp).
  std::string baseline_key;
  std::optional<GateRecord> base_verdict;
  double base_seconds = 0;

  // The exploration (phases/explore.cpp).
  nlohmann::json executors = nlohmann::json::array();
  long executors_rss_kb = 0;
  double explore_s = 0;

  // The candidates, in gating order, and the compositions made of them (phases/candidates.cpp, compose.cpp).
  std::vector<Candidate> cands;
  std::set<std::string> seen;  // manifest hashes proposed or composed, the baseline's included
  size_t first_round = 0;      // cands[0, first_round): each family's first proposal
  std::vector<Candidate> composed;
  PhaseTotals gate_phase, compose_phase;

  // The tiers (phases/tiers.cpp, deploy.cpp).
  nlohmann::json tiers = nlohmann::json::object(), tier_notes = nlohmann::json::object();
  nlohmann::json deploy_checks;

  // The workers that take requests at once: the Slurm tasks or this host's slots, at least one.
  size_t worker_count() const;
  // What composes and counts: an accepted candidate; on a reduced configuration one that passed every
  // gate but the official-config one.
  bool survives(const Candidate& c) const { return official ? c.accepted() : c.survived_reduced(); }
};

}  // namespace autooptim::orchestrator
