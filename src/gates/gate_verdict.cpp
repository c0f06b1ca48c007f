#include "gates/gate_verdict.h"

#include <algorithm>
#include <utility>

using nlohmann::json;

namespace autooptim::gates {

const GateCheck* GateVerdict::check(const std::string& name) const {
  for (const auto& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

json GateVerdict::to_json() const {
  json gates = json::object();
  for (const auto& c : checks) gates[c.name] = {{"pass", c.pass}, {"reason", c.reason}, {"details", c.details}};
  return {{"manifest", manifest_id},
          {"manifest_hash", manifest_hash},
          {"split", split},
          {"accepted", accepted},
          {"refused", refused},
          {"baseline_seconds", baseline_seconds},
          {"candidate_seconds", candidate_seconds},
          {"speedup", speedup},
          {"psnr", psnr},
          {"ssim", ssim},
          {"failure_signature", failure_signature},
          {"baseline_hash", baseline_hash},
          {"integrity", integrity},
          {"gates", gates}};
}

void decide_verdict(GateVerdict& v) {
  v.accepted = std::all_of(v.checks.begin(), v.checks.end(), [](const GateCheck& c) { return c.pass; });
  if (v.accepted) return;
  static const std::vector<std::pair<std::string, std::string>> signatures = {
      {"artifacts", "artifact"},
      {"authenticity", "no-op"},
      {"off_identity", "off-identity-break"},
      {"quality", "quality-cliff"},
      {"visual", "visual-artifact"},
      {"performance", "slowdown"},
      {"official_config", "off-official-config"}};
  for (const auto& [gate, sig] : signatures)
    if (const auto* c = v.check(gate); c && !c->pass) {
      v.failure_signature = sig;
      break;
    }
  // A clip that lost the baseline's object, colour or motion and has no artifact: its own signature.
  if (const auto* c = v.check("visual");
      v.failure_signature == "visual-artifact" && c && c->details.value("new_artifacts", json::array()).empty())
    v.failure_signature = "semantic-loss";
}

}  // namespace autooptim::gates
