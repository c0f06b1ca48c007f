#pragma once
// The phases of `autooptim run` over one RunState, in the order run() calls them (orchestrator.cpp):
//   start      the pinned baseline, the run folder, its lock and the workers; the verdicts to resume
//   plan       --plan: calibrate on one worker, print the estimate, write plan.json
//   baseline   the baseline gated against itself (or taken from the cross-run cache)
//   explore    one executor process per family, proposing manifests into its outbox
//   candidates the proposals collected, ordered and gated, with a compose round after each step
//   job queue  the screens and gate runs of a list of manifests, through the workers, within the budgets
//   compose    the best survivor of each family composed into new candidates
//   tiers      per bucket the best accepted candidate that holds on the held-out prompts
//   deploy     each tier through `generate --manifest` (docs/deploy.md); the workers leave first
//   report     report.json and its pages, and the exit status
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gates/gate_plan.h"
#include "orchestrator/run_state.h"

namespace autooptim::orchestrator {

// --- start (start.cpp)
// The harness's pinned baseline of req's model at the run's configuration; Error when the installed
// manifests/<model>/baseline.json differs from it.
gates::Manifest run_baseline(const RunRequest& req);
// What can be checked before the run folder is touched: the splits hold prompts, the weights folder
// reads, --plan runs locally; plans the local worker slots.
void check_inputs(RunState& s);
// Starts the workers (on this host or as Slurm tasks) and waits for one to be ready. Throws Error with
// the reason a worker gave when none could start, or after timeout_s (> 0).
workers::WorkerInfo start_workers(Launcher& launcher, workers::Client& client, Progress& progress,
                                  double timeout_s = 0);
// Locks the run folder, writes the baseline and the visible prompts, starts the workers. A failure
// removes what it added and rethrows.
void open_run(RunState& s);
// The ledger, the verdicts to resume (decided in the first worker's environment), the gate settings
// and the prompt counts.
void prepare_gating(RunState& s);
// The verdicts already in s.ledger (resume): manifest hash + split -> record, where decided in the first
// worker's environment (build, weights, device, dtype). A row that does not read as a verdict is not
// resumed, with a warning naming it and the key.
void resume_verdicts(RunState& s);

// Where a run keeps baseline outputs and the baseline's verdict when --baseline-cache is not given: on a GPU,
// one folder per machine that every run shares ($AUTOOPTIM_CACHE_DIR/baseline-cache, else
// $XDG_CACHE_HOME/autooptim/baseline-cache, else ~/.cache/autooptim/baseline-cache; a baseline's gate at the
// official configuration costs most of an hour there); on a CPU, OUT/baseline-cache (the run's own).
std::string default_baseline_cache(const std::filesystem::path& out, const std::string& device,
                                   const std::function<const char*(const char*)>& env);

// --- plan (plan.cpp)
// One gate run of `req`'s settings on a split of prompts_in_split prompts (ids: their names where known),
// with the split's baseline outputs cached or not; and its seconds at a baseline clip of clip_s and a
// candidate `speedup` times faster.
std::vector<gates::PlannedGeneration> gate_plan_of(const RunRequest& req, int64_t prompts_in_split, bool split_cached,
                                                   const std::vector<std::string>& ids = {},
                                                   bool baseline_gate = false);
double plan_seconds(const std::vector<gates::PlannedGeneration>& plan, const gates::ClipCost& cost, double speedup);
// plan.json's object for a calibration and its estimate.
nlohmann::json plan_json(const RunState& s, const nlohmann::json& calibration, const PlanEstimate& e);
// --plan: calibrates on one worker in a private folder, prints the estimate; exit 2 when not enough.
RunOutcome plan_run(RunState& s);

// --- workers while the run goes on (workers_watch.cpp)
// Restarts or records the workers that died (worker_events); no restarts once the run is interrupted.
void keep_workers(RunState& s);
// "<worker>: <stage>; ..." of the workers busy with a request, for the progress line.
std::string stage_line(RunState& s);

// --- baseline (baseline.cpp)
// The key of the baseline's own gate verdict in the cross-run cache.
std::string baseline_key(const workers::WorkerInfo& w, const gates::Manifest& base, const std::string& split,
                         const std::vector<gates::Prompt>& prompts, const gates::GateSettings& gs);
void baseline_phase(RunState& s);

// --- explore (explore.cpp)
// The executors, one process per family, until they finish or the exploration's deadline (half of what
// --budget-minutes has left after the baseline's phase) stops them; fills s.executors.
void explore_phase(RunState& s);
// When the exploration stops, in seconds from the run's start, where it began `began_s` in: half of what the
// budget then had left (the plan prices a run by the same rule).
double exploration_deadline_s(double budget_s, double began_s);
// The run's executors by name, in start order: each family's built-in searcher (unless --agent-only and an
// agent takes the family), then "agent-<family>" for each --agent. Each name is an outbox (OUT/outbox/<name>).
std::vector<std::string> executor_names(const RunRequest& req);

// --- job queue (job_queue.cpp)
// The verdicts on the split and the hashes confirmed on the held-out split, from s.done.
std::pair<std::vector<GateRecord>, std::set<std::string>> tier_verdicts(const RunState& s);
// Gate runs kept back for the held-out checks of the current tier winners.
int64_t reserve_runs(const RunState& s);
// Seconds kept back for them, the held-out gate priced by its generations against a split gate's.
double reserve_s(const RunState& s, int64_t workers);
// Why job j may not start now (a budget spent, an interruption), "" when it may; `capacity` workers.
std::string why_not_gate(const RunState& s, const Job& j, int64_t capacity);
// The screen result of the response `r` to a screen request, with the drop decision against s.screen_min.
nlohmann::json judge_screen(const RunState& s, const workers::Response& r);
// The response file to request `id` (Client::poll) as the typed message; one that does not fit it reads as a
// failed request whose error names the key (never a silent 0 or false).
workers::Response response_of(const nlohmann::json& r, const std::string& id);
// A gate run's verdict, read from the response to j's gate request once: typed for the decisions, and as the
// JSON that s.done, the report and the ledger keep.
struct GateAnswer {
  workers::GateVerdictResult verdict;
  nlohmann::json row;
  bool ran = false;  // the worker's verdict; false: the candidate could not run (rejected with the reason)
};
// A failed request, or a verdict that does not fit the typed message (the error names the key), rejects the
// candidate as one that could not run, with the reason.
GateAnswer gate_answer(const Job& j, const workers::Response& r);
// Runs jobs through the workers: at most one request in flight per worker, so the budget is checked as
// each gate starts; screens first where asked. Verdicts already in s.done are reused.
void run_jobs(RunState& s, std::vector<Job>& jobs);
// One manifest on one split (phase names it in the progress); its verdict, none when not gated.
std::optional<GateRecord> gate_one(RunState& s, const gates::Manifest& m, const std::string& split,
                                   const std::string& phase);
// The skip ratio an executor measured for m's flags (trials.jsonl), null when none did.
nlohmann::json skip_ratio_of(const RunState& s, const gates::Manifest& m);
// Screens and gates candidates on the split; each gets its verdict.
void gate_candidates(RunState& s, std::vector<Candidate>& cs, const std::string& phase);

// --- candidates (candidates.cpp)
// The proposals in the outboxes, in each executor's order, de-duplicated by manifest hash (the
// baseline's included); then round robin across families.
void collect_candidates(RunState& s);
// Round robin across families (each family's first proposal, then each one's second, ...); returns
// how many lead (each family's first, at least one per worker).
size_t order_round_robin(std::vector<Candidate>& cands, size_t workers);
// Gates the first round, composes, then the rest one step of workers at a time, composing after each.
void gate_and_compose(RunState& s);

// --- compose (compose.cpp)
// The new compositions of the best survivor of each family (pairs, and all when three or more); each
// hash enters s.seen.
std::vector<Candidate> next_compositions(RunState& s);
// Gates next_compositions() and keeps them in s.composed.
void compose_round(RunState& s);

// --- tiers (tiers.cpp)
// The held-out gate of a tier candidate: its verdict, none when it could not run.
using HeldoutGate = std::function<std::optional<GateRecord>(const Candidate&)>;
// Fills s.tiers and s.tier_notes from s.cands (compositions included), checking each bucket's best on the
// held-out split through `heldout` (once per candidate).
void choose_tiers(RunState& s, const HeldoutGate& heldout);

// --- deploy (deploy.cpp)
// Stops the workers, then the deploy check of each tier (docs/deploy.md); fills s.deploy_checks and drops
// a tier that does not reproduce.
void deploy_phase(RunState& s);

// --- report (run_report.cpp)
// The workers' final counters (after they left) and the launcher's description, for the report.
struct WorkerTotals {
  nlohmann::json rows = nlohmann::json::array();
  double held_s = 0, generating_s = 0, busy_s = 0;
  long peak_rss_kb = 0;
  int64_t peak_device = 0;
  nlohmann::json launcher;
};
WorkerTotals worker_totals(const RunState& s);
// The report's baseline block and one candidate's entry (its verdicts, screen, device time, clips).
nlohmann::json baseline_entry(const RunState& s);
nlohmann::json candidate_entry(const RunState& s, const Candidate& c);
// The whole report object, before judge_run adds its outcome.
nlohmann::json build_report(const RunState& s, const WorkerTotals& workers);
// Judges the report, writes it (report.json and its pages) and returns the outcome.
RunOutcome finish_report(RunState& s);

}  // namespace autooptim::orchestrator
