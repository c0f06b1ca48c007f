#pragma once
// The baseline against the machine (docs/gate-defences.md, "a slowed baseline"): its denoising efficiency
// against the throughput calibrated next to its runs, and against the records of earlier gates on this
// machine. A slowed baseline is an error of the run, never a speedup.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"

namespace autooptim::gates {

// The fastest rates seen over the gate's calibration rounds (noise only ever slows a round).
Calibration best_calibration(const std::vector<Calibration>& rounds);

// The baseline whose speed is judged, and where its records are.
struct BaselineIdentity {
  std::string model, baseline_hash, build, candidate_id;
  nlohmann::json environment;  // gate_environment()
  nlohmann::json config;       // the baseline's run configuration
  std::string records_path;
};

struct BaselineSpeed {
  nlohmann::json report;  // integrity.baseline_speed
  std::string problem;    // why the baseline is too slow ("" when it is not)
  bool trusted = false;   // no problem, no untimed work, not slower than the records: the entry goes in
  std::string key;        // the records' key of this machine, build flavour, model, weights, config, ...
  nlohmann::json identity, entry;
};

// The efficiency floor: settings.min_baseline_efficiency, or the model's and device's default.
double baseline_efficiency_floor(const GateSettings& settings, const std::string& model, bool on_cuda);

// The records' identity of this baseline on this machine (its identity with the machine's), and its key.
nlohmann::json baseline_record_identity(const BaselineIdentity& identity, int baseline_threads);
std::string baseline_record_key(const nlohmann::json& record_identity);

// record_identity: baseline_record_identity(); records: the entries recorded under its key
// (BaselineRecords::entries). untimed_clean: no work outside the candidate's windows (which slows the
// baseline's runs itself).
BaselineSpeed judge_baseline_speed(const GateEvidence& evidence, const BaselineIdentity& identity,
                                   const nlohmann::json& record_identity, const std::vector<nlohmann::json>& records,
                                   bool untimed_clean, const GateSettings& settings);

}  // namespace autooptim::gates
