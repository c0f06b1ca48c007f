#pragma once
// The deterministic gate harness: runs a candidate manifest and its baseline on a prompt split and
// decides the six gates and the authenticity check (../docs/harness.md). It is the only authority on
// acceptance and the only part that reads the held-out prompts.
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gates/baseline_error.h"
#include "gates/gate_check.h"
#include "gates/gate_settings.h"
#include "gates/ledger.h"
#include "gates/manifest.h"
#include "gates/worker.h"
#include "base/error.h"

namespace autooptim::gates {

// The settings a gate request carries from the orchestrator to a worker: every judgement setting (the
// thresholds, the floor, the object check, the folders); not baseline_config (the request carries the
// baseline's manifest) nor progress. Missing keys keep their defaults; a key of the wrong type throws.
nlohmann::json settings_to_json(const GateSettings& s);
GateSettings settings_from_json(const nlohmann::json& j);

struct GateVerdict {
  std::string manifest_id;
  std::string manifest_hash;
  std::string split;
  bool accepted = false;
  bool refused = false;  // a retry of an already-rejected manifest (same hash, same build)
  std::vector<GateCheck>
      checks;  // artifacts, official_config, performance, off_identity, quality, visual, authenticity
  double baseline_seconds = 0, candidate_seconds = 0, speedup = 0;
  double psnr = 0, ssim = 0;      // worst prompt's clip means
  std::string failure_signature;  // no-op, off-identity break, quality cliff, slowdown, artifact, ...
  std::string baseline_hash;      // the pinned baseline that ran (at the harness's configuration)
  // How the gate defended itself: the pinned baseline, calibration and records, the cache check, the
  // drawn prompts/seeds, threads and untimed work (docs/gate-defences.md).
  nlohmann::json integrity = nlohmann::json::object();
  nlohmann::json to_json() const;
  const GateCheck* check(const std::string& name) const;
};

// Runs the whole gate; writes the fixed-name artifacts under out_dir and one ledger row.
// Throws Error only when the gate could not run (bad manifest, missing base, unknown split).
GateVerdict run_gate(Worker& worker, const Manifest& candidate, const std::string& split, const std::string& out_dir,
                     const GateSettings& settings, Ledger* ledger);

// Finds the manifest with this id among the model's manifests under dir (manifests/<model>/*.json).
Manifest find_manifest(const std::string& manifests_dir, const std::string& model, const std::string& id);

// The harness's own baseline of a model: every technique off, libtorch's own threads, the official
// configuration. Built in code, so no file can replace it; manifests/<model>/baseline.json is a copy
// with the same hash (a test checks).
Manifest pinned_baseline(const std::string& model);

// The environment a verdict holds for: build, weights fingerprint, device, device name, dtype, CPU BLAS threads.
nlohmann::json gate_environment(Worker& worker);
// Whether a ledger row was decided in the same environment as this worker's (build, weights, device,
// dtype): only such a verdict may be reused (resume) or refuse a retry.
bool same_environment(const nlohmann::json& row, Worker& worker);

}  // namespace autooptim::gates
