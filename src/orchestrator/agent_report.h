#pragma once
// What the report says of each agent executor (docs/agents.md): its brief and transcript, its tool calls
// with their results, its time, its proposals with their verdicts, and everything that was blocked.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace autooptim::orchestrator {

struct RunState;

// The agent's own records, read from OUT/outbox/<name>/ and OUT/agents/<name>/ after it ended.
nlohmann::json agent_records(const std::filesystem::path& out, const std::string& name);

// The report's "agents": each agent executor's records with its proposals' verdicts.
nlohmann::json agents_section(const RunState& s);

}  // namespace autooptim::orchestrator
