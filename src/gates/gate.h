#pragma once
// The deterministic gate harness: runs a candidate manifest and its baseline on a prompt split and
// decides the six gates and the authenticity check (../docs/harness.md). It is the only authority on
// acceptance and the only part that reads the held-out prompts.
#include <nlohmann/json.hpp>
#include <functional>
#include <string>
#include <vector>

#include "gates/ledger.h"
#include "gates/manifest.h"
#include "gates/worker.h"

namespace autooptim::gates {

// Where a gate run is: announced before each generation it runs.
struct GateProgress {
  std::string manifest_id, split;
  std::string stage;         // "warm-up baseline", "timed candidate", "duplicate-prompt audit", ...
  int64_t run = 0, runs = 0;  // this generation's number, and how many the gate expects to run
  double elapsed_s = 0;      // since the gate run began
};

struct GateSettings {
  std::string prompts_dir = "prompts";
  std::string manifests_dir = "manifests";  // where the base manifest is found by id
  std::string cache_dir;                    // baseline outputs; default <out>/../baseline-cache
  int64_t timing_repeats = 3;               // interleaved baseline/candidate timed pairs
  double min_margin = 0.03;                 // a speedup must beat the noise and at least this
  // Quality tolerance for lossy candidates (gate 5); lossless ones must match within lossless_psnr.
  double min_psnr = 30.0;
  double min_ssim = 0.90;
  double lossless_psnr = 50.0;
  // Off identity (gate 4): outputs equal (or within lossless_psnr on nondeterministic GPUs) and time
  // within max(2 x noise, this) of the baseline.
  double off_time_tolerance = 0.15;
  bool exact_off_identity = true;  // CPU runs are deterministic: demand bit-identical output
  int64_t max_prompts = 0;         // 0 = the whole split
  // Called before every generation (gate and run show it as progress). An exception it throws ends
  // the gate run without a verdict (how an interrupted run stops the gate it is in).
  std::function<void(const GateProgress&)> progress;
};

struct GateCheck {
  std::string name;
  bool pass = false;
  std::string reason;
  nlohmann::json details = nlohmann::json::object();
};

struct GateVerdict {
  std::string manifest_id;
  std::string manifest_hash;
  std::string split;
  bool accepted = false;
  bool refused = false;  // a retry of an already-rejected manifest (same hash, same build)
  std::vector<GateCheck> checks;  // artifacts, official_config, performance, off_identity, quality, visual, authenticity
  double baseline_seconds = 0, candidate_seconds = 0, speedup = 0;
  double psnr = 0, ssim = 0;  // worst prompt's clip means
  std::string failure_signature;  // no-op, off-identity break, quality cliff, slowdown, artifact, ...
  nlohmann::json to_json() const;
  const GateCheck* check(const std::string& name) const;
};

// Runs the whole gate; writes the fixed-name artifacts under out_dir and one ledger row.
// Throws Error only when the gate could not run (bad manifest, missing base, unknown split).
GateVerdict run_gate(Worker& worker, const Manifest& candidate, const std::string& split, const std::string& out_dir,
                     const GateSettings& settings, Ledger* ledger);

// Finds the manifest with this id among the model's manifests under dir (manifests/<model>/*.json).
Manifest find_manifest(const std::string& manifests_dir, const std::string& model, const std::string& id);

}  // namespace autooptim::gates
