#include "orchestrator/gate_record.h"

using nlohmann::json;

namespace autooptim::orchestrator {

GateRecord GateRecord::read(const json& row, const std::string& what) {
  const workers::MessageReader r(row, what);
  GateRecord g;
  g.manifest_hash = r.string("manifest_hash");
  g.split = r.string("split");
  g.accepted = r.boolean("accepted");
  g.speedup = r.number("speedup");
  g.psnr = r.number("psnr");
  g.ssim = r.number("ssim");
  g.failure_signature = r.string("failure_signature");
  if (row.contains("baseline_seconds")) g.baseline_seconds = r.number("baseline_seconds");
  if (row.contains("candidate_seconds")) g.candidate_seconds = r.number("candidate_seconds");
  for (const auto& [name, check] : r.object("gates").items()) {
    const workers::MessageReader c(check, what + ": gates." + name);
    workers::GateCheckResult x;
    x.pass = c.boolean("pass");
    if (check.contains("reason")) x.reason = c.string("reason");
    if (check.contains("details")) x.details = c.object("details");
    g.gates[name] = x;
  }
  g.row = row;
  return g;
}

bool GateRecord::passed(const std::string& check) const {
  const auto it = gates.find(check);
  return it != gates.end() && it->second.pass;
}

bool GateRecord::survived_reduced() const {
  if (accepted) return true;
  if (gates.empty()) return false;
  for (const auto& [name, x] : gates)
    if (name != "official_config" && !x.pass) return false;
  return true;
}

const json& GateRecord::performance_details() const {
  static const json none = json::object();
  const auto it = gates.find("performance");
  return it == gates.end() ? none : it->second.details;
}

bool ranks_above(const GateRecord& a, const GateRecord& b) {
  if (a.psnr != b.psnr) return a.psnr > b.psnr;
  return a.speedup > b.speedup;
}

}  // namespace autooptim::orchestrator
