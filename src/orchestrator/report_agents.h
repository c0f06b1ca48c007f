#pragma once
// The report's agents section (report.md and report.html): per agent executor, its command and sandbox,
// how it ended, its time, what was blocked, its proposals with their verdicts, and its tool calls.
#include <nlohmann/json.hpp>

#include <ostream>

namespace autooptim::orchestrator {

void markdown_agents(std::ostream& o, const nlohmann::json& report);
void html_agents(std::ostream& o, const nlohmann::json& report);

}  // namespace autooptim::orchestrator
