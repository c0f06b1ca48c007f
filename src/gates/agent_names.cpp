#include "gates/agent_names.h"

namespace autooptim::gates {
namespace {

constexpr const char* kAgentPrefix = "agent-";

}  // namespace

std::string agent_executor_name(const std::string& agent_family) { return kAgentPrefix + agent_family; }

bool is_agent_executor(const std::string& executor_name) { return executor_name.rfind(kAgentPrefix, 0) == 0; }

std::string agent_family_of(const std::string& executor_name) {
  return is_agent_executor(executor_name) ? executor_name.substr(std::string(kAgentPrefix).size()) : "";
}

std::string agent_proposal_prefix(const std::string& agent_family) { return agent_executor_name(agent_family) + "-"; }

// A manifest's name is the last part of its id (MODEL/FAMILY/NAME), so an agent's shows as "/agent-".
bool is_agent_proposal(const std::string& manifest_id) {
  return manifest_id.find(std::string("/") + kAgentPrefix) != std::string::npos;
}

bool is_proposal_of_agent(const std::string& manifest_id, const std::string& agent_family) {
  return manifest_id.find("/" + agent_proposal_prefix(agent_family)) != std::string::npos;
}

std::string agent_manifest_family(const std::string& agent_family) {
  return agent_family == "vae" ? "kernel" : agent_family;
}

std::string proposal_source(const std::string& manifest_family, const std::string& manifest_id) {
  return is_agent_proposal(manifest_id) ? manifest_family + ":agent" : manifest_family;
}

std::string agent_plugins_dir(const std::string& outbox) { return outbox + "/plugins"; }

std::string agent_plugin_file(const std::string& outbox, const std::string& sha256) {
  return agent_plugins_dir(outbox) + "/" + sha256 + ".so";
}

}  // namespace autooptim::gates
