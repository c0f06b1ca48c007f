#include "orchestrator/agent_report.h"

#include <fstream>

#include "base/json_lines.h"
#include "gates/agent_names.h"
#include "orchestrator/run_state.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

json read_object(const fs::path& p) {
  std::ifstream in(p);
  try {
    return in ? json::parse(in) : json::object();
  } catch (const std::exception&) {
    return json::object();
  }
}

// One proposal's verdict on the gating split: accepted or not, its figures, the gates it failed.
json proposal_entry(const RunState& s, const Candidate& c) {
  json e = {{"id", c.m.id}, {"why", c.m.description}, {"gated", c.val.has_value()}};
  if (!c.val) {
    const auto it = s.not_gated.find({c.hash, s.req.split});
    e["reason"] = it != s.not_gated.end() ? it->second : "not gated";
    return e;
  }
  e["accepted"] = c.accepted();
  e["speedup"] = c.speedup();
  e["psnr"] = c.psnr();
  json failed = json::array();
  for (const auto& [g, x] : c.val->gates)
    if (!x.pass) failed.push_back(g + ": " + x.reason);
  e["failed"] = failed;
  return e;
}

}  // namespace

json agent_records(const fs::path& out, const std::string& name) {
  const fs::path box = out / "outbox" / name;
  json a = read_object(box / "agent.json");
  a["brief"] = "agents/" + name + "/workspace/BRIEF.md";
  a["transcript"] = "agents/" + name + "/transcript.log";
  a["tool_calls"] = base::read_json_lines(box / "tools.jsonl", 500);
  a["blocked_events"] = base::read_json_lines(box / "blocked.jsonl", 500);
  return a;
}

json agents_section(const RunState& s) {
  json agents = json::array();
  for (const auto& e : s.executors) {
    if (!e.contains("agent")) continue;
    json a = e["agent"];
    a["state"] = e.value("state", "");
    a["reason"] = e.value("reason", "");
    const std::string name = e.value("family", "");
    json proposals = json::array();
    for (const auto& c : s.cands)
      if (gates::is_proposal_of_agent(c.m.id, gates::agent_family_of(name)) && c.m.family != "composite")
        proposals.push_back(proposal_entry(s, c));
    a["proposal_verdicts"] = proposals;
    agents.push_back(a);
  }
  return agents;
}

}  // namespace autooptim::orchestrator
