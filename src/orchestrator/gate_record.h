#pragma once
// A gate verdict as the run keeps it between its phases: what the job queue made of a worker's answer (the
// verdict, or a could-not-run record when the candidate could not even run), the baseline's verdict taken
// from the cross-run cache, or a ledger row of an earlier run (resume). Read once, strictly: a missing or
// mistyped key is an Error naming it and the record. The phases read its fields; the record itself travels
// beside them, unchanged, for the ledger and the report.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "workers/messages.h"

namespace autooptim::orchestrator {

struct GateRecord {
  std::string manifest_hash, split;
  bool accepted = false;
  double speedup = 0, psnr = 0, ssim = 0;
  // Seconds per clip it measured of the baseline and the candidate (0 where it could not run).
  double baseline_seconds = 0, candidate_seconds = 0;
  std::string failure_signature;
  std::map<std::string, workers::GateCheckResult> gates;  // a check's details: {} where the record has none
  nlohmann::json row;                                     // the record as read

  // Keys every record has: manifest_hash, split, accepted, speedup, psnr, ssim, failure_signature and gates
  // (each with pass; reason and details where the check says more). The seconds are read where present (a
  // could-not-run record measured nothing).
  static GateRecord read(const nlohmann::json& row, const std::string& what);

  bool passed(const std::string& check) const;  // false where the record has no such check
  // Passed every check but the official-config one: what a reduced-configuration run can show.
  bool survived_reduced() const;
  // The performance check's details ({} where it has none).
  const nlohmann::json& performance_details() const;
};

// The tier rule: better quality first, then more speed.
bool ranks_above(const GateRecord& a, const GateRecord& b);

}  // namespace autooptim::orchestrator
