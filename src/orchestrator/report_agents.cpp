#include "orchestrator/report_agents.h"

#include <string>
#include <vector>

#include "orchestrator/report_text.h"

using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

using report_text::arr;
using report_text::esc;
using report_text::get;
using report_text::num;
using report_text::str;

// One agent in plain sentences, the same for both pages.
struct AgentText {
  std::string title;
  std::vector<std::string> facts, blocked, proposals, calls;
};

std::string call_text(const json& c) {
  std::string s = str(c, "tool");
  const json& args = c.value("args", json::object());
  if (args.value("prompts", 0) > 0) s += " --prompts " + std::to_string(args.value("prompts", 0));
  for (const auto& id : args.value("prompt_ids", json::array())) s += " --prompt " + id.get<std::string>();
  if (args.contains("manifest") && !args["manifest"].is_null()) s += " " + args["manifest"].dump();
  if (!str(args, "why").empty()) s += " (why: " + str(args, "why").substr(0, 200) + ")";
  if (!str(args, "text").empty()) s += ": " + str(args, "text").substr(0, 200);
  if (!c.value("ok", false)) return s + " -> refused: " + str(c, "error");
  const json& res = c.value("result", json::object());
  if (res.contains("speedup"))
    s += " -> " + num(get(res, "speedup")) + "x, worst PSNR " + num(get(res, "psnr_min")) + " dB, SSIM " +
         num(get(res, "ssim_min"), 3);
  else if (res.contains("id"))
    s += " -> proposed " + str(res, "id");
  return s;
}

AgentText agent_text(const json& a) {
  AgentText t;
  t.title = str(a, "name") + " (" + str(a, "family") + ")";
  t.facts.push_back("command: " + str(a, "command"));
  t.facts.push_back(
      "sandbox: " + str(a, "sandbox") +
      (a.contains("network") && a["network"].is_string() ? ", network: " + str(a, "network") : ", no network"));
  t.facts.push_back("state: " + str(a, "state") + " (" + str(a, "reason") + "); the agent ended: " + str(a, "ended"));
  t.facts.push_back("wall " + num(get(a, "wall_s"), 0) + " s; its trials kept the workers " +
                    num(get(a, "trial_s"), 1) + " s; " + std::to_string(a.value("tool_call_count", 0)) +
                    " tool calls; peak " + std::to_string(a.value("peak_processes", 0)) + " processes, " +
                    num(get(a, "peak_rss_bytes") / 1e6, 0) + " MB");
  t.facts.push_back("brief: " + str(a, "brief") + "; transcript: " + str(a, "transcript"));
  for (const auto& b : arr(a, "blocked_events")) t.blocked.push_back(str(b, "what") + ": " + str(b, "detail"));
  for (const auto& p : arr(a, "proposal_verdicts")) {
    std::string s = str(p, "id") + ": ";
    if (!p.value("gated", false))
      s += "not gated (" + str(p, "reason") + ")";
    else if (p.value("accepted", false))
      s += "accepted, " + num(get(p, "speedup")) + "x, " + num(get(p, "psnr")) + " dB";
    else
      s += "rejected (" + report_text::join(arr(p, "failed"), "; ") + ")";
    t.proposals.push_back(s + "; why: " + str(p, "why"));
  }
  for (const auto& c : arr(a, "tool_calls")) t.calls.push_back(call_text(c));
  return t;
}

void md_list(std::ostream& o, const std::string& head, const std::vector<std::string>& items, const char* none) {
  o << "\n" << head << (items.empty() ? std::string(": ") + none + "\n" : ":\n");
  for (const auto& i : items) o << "- " << i << "\n";
}

void html_list(std::ostream& o, const std::string& head, const std::vector<std::string>& items, const char* none) {
  o << "<p>" << esc(head) << (items.empty() ? std::string(": ") + none : ":") << "</p>";
  if (items.empty()) return;
  o << "<ul>";
  for (const auto& i : items) o << "<li>" << esc(i) << "</li>";
  o << "</ul>";
}

}  // namespace

void markdown_agents(std::ostream& o, const json& r) {
  const json& agents = arr(r, "agents");
  if (agents.empty()) return;
  o << "\n## Agents\n";
  for (const auto& a : agents) {
    const AgentText t = agent_text(a);
    o << "\n### " << t.title << "\n\n";
    for (const auto& f : t.facts) o << "- " << f << "\n";
    md_list(o, "Blocked", t.blocked, "nothing");
    md_list(o, "Proposals and verdicts", t.proposals, "none");
    md_list(o, "Tool calls", t.calls, "none");
  }
}

void html_agents(std::ostream& o, const json& r) {
  const json& agents = arr(r, "agents");
  if (agents.empty()) return;
  o << "<h2>Agents</h2>";
  for (const auto& a : agents) {
    const AgentText t = agent_text(a);
    o << "<h3>" << esc(t.title) << "</h3><ul>";
    for (const auto& f : t.facts) o << "<li>" << esc(f) << "</li>";
    o << "</ul>";
    html_list(o, "Blocked", t.blocked, "nothing");
    html_list(o, "Proposals and verdicts", t.proposals, "none");
    o << "<details><summary>" << t.calls.size() << " tool calls</summary>";
    html_list(o, "Tool calls", t.calls, "none");
    o << "</details>";
  }
}

}  // namespace autooptim::orchestrator
