#pragma once
// The deploy check: each tier a run delivers is generated again through the deploy path (`autooptim generate
// --manifest tiers/<bucket>.json`, its own processes, as a user runs it) and timed against the baseline through
// the same path. The tier is delivered only when that clip is the gate's clip bit for bit and its speedup is
// within the gate's noise of the gated one (docs/deploy.md).
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "gates/manifest.h"
#include "gates/prompts.h"

namespace autooptim::orchestrator {

// How and where the deploy path runs: the workers' model options, devices and threads.
struct DeploySetup {
  std::string dir;                     // the check's files: deploy/<manifest slug>/ under the run folder
  std::vector<std::string> model_cli;  // --model ... --device ... as the run's workers got them
  std::string cuda_visible;            // the first worker's CUDA_VISIBLE_DEVICES ("" on the CPU)
  int64_t threads = 0;                 // the first worker's libtorch threads (passed as --threads)
  gates::Manifest baseline;            // the pinned baseline at the run's configuration
  gates::Prompt prompt;                // the split's first prompt: the gate's clip of it is the reference
  int64_t seed = 0;                    // the configuration's seed (the gate's clips are at it)
  int64_t pairs = 2;                   // alternating baseline / tier processes
  int64_t repeat = 2;                  // generations per process; the last is timed (the first pays warm-up)
  std::function<bool()> stop;          // true: the run was interrupted; the check ends without a verdict
  std::string binary;  // the autooptim binary a plugin's tier check runs ("" this process's; a test names it)
  // The weights folder the first worker loaded ("" synthetic): a sandboxed generate sees no other folder, the
  // shipped trained wan22-tiny's included, so it is named and bound.
  std::string weights_dir;
};

// What the tier's gate run recorded (its clips.json and verdict).
struct DeployExpectation {
  std::string clip_sha256;      // the tier's clip of the prompt at the seed ("" when the gate recorded none)
  std::string baseline_sha256;  // the baseline's clip there
  double gated_speedup = 0;
  double gate_noise = 0;  // the gate's timing margin (relative), the tolerance of the reproduction
};

struct DeployResult {
  bool ran = false;
  std::string not_run;  // why it did not run (interrupted, the workers ran on other hosts)
  bool bit_exact = false, baseline_bit_exact = false;
  std::vector<double> baseline_s, tier_s;  // the timed generation of each process
  double speedup = 0, spread = 0, tolerance = 0;
  bool reproduced = false;  // bit-exact clips, and the speedup the gated one within the tolerance
  std::string reason;       // one sentence: why it reproduced or not
  std::string how;          // how it was measured, where not as above (a plugin's tier: orchestrator/plugin_deploy.h)
  nlohmann::json to_json() const;
};

// The expectation of a tier from its gate run folder (clips.json, verdict.json): the clip of `prompt_id`.
// Empty where the folder has no verdict; a verdict that does not read is an Error naming the file and key.
DeployExpectation expectation_from_gate_dir(const std::string& gate_dir, const std::string& prompt_id);

// Judges measured runs against the expectation: bit-exact clips (tier and baseline) and a speedup no lower
// than the gated one less the larger of the gate's noise and this check's own spread. Fills speedup, spread,
// tolerance, reproduced and reason.
void judge_deploy(DeployResult& r, const DeployExpectation& e);

// One process's measurement in the pairs loop: its seconds per clip and whether its clip is the expected
// one. why: "" when it made a clip, "interrupted", or how it failed (one sentence).
struct DeploySide {
  double seconds = 0;
  bool expected_clip = false;
  std::string why;
};

// The loop every deploy check runs: pairs x (baseline, tier), each side measured by `measure(is_tier,
// pair)`; the first failure ends it (its reason, not reproduced), an interruption ends it not run, and the
// rest is judged (judge_deploy). r: what the caller filled already (how it measured).
DeployResult run_deploy_pairs(const DeploySetup& s, const DeployExpectation& e,
                              const std::function<DeploySide(bool is_tier, int64_t pair)>& measure,
                              DeployResult r = {});

// Runs the check for one tier manifest: pairs x (baseline, tier) `generate` processes, then judge_deploy.
// Throws Error only for a failure of this process (a folder it cannot write); a generate that fails is a
// result (not reproduced, with its log's last line).
DeployResult deploy_check(const DeploySetup& s, const gates::Manifest& tier, const DeployExpectation& e);

// Whether a bucket that needs `need` x may be delivered with this check's result (a result's JSON): not
// checked (nothing to hold against it), or bit-exact clips and a speedup through the deploy path that meets
// the bucket within the tolerance. A tier slower through generate than in its gate (not `reproduced`) may
// still hold a lower bucket: that bucket is then delivered at the deploy path's figure.
bool deliverable(const nlohmann::json& deploy, double need);

// "reproduced 2.93x, bit-exact: yes" / "did not reproduce: ..." / "not checked: ...": the report's words.
std::string deploy_summary(const nlohmann::json& deploy);

}  // namespace autooptim::orchestrator
