#pragma once
// How an agent executor (docs/agents.md) and what it proposes are named: the orchestrator starts, reads and
// reports agents by these names and the executor host writes under them, so the convention lives here once.
// An agent of family F runs as the executor "agent-F" (its outbox OUT/outbox/agent-F/, its folder
// OUT/agents/agent-F/); each manifest it proposes is named "agent-F-<slug>", so its id is
// MODEL/<manifest family>/agent-F-<slug> and never meets a built-in searcher's.
#include <string>

namespace autooptim::gates {

// The executor's name in the run, its outbox and its client id: "agent-<family>".
std::string agent_executor_name(const std::string& agent_family);

// Whether an executor's name is an agent's (otherwise it is a family's built-in searcher).
bool is_agent_executor(const std::string& executor_name);

// The agent family of an agent executor's name ("agent-cache" -> "cache"); "" for a built-in searcher's.
std::string agent_family_of(const std::string& executor_name);

// What every manifest name the agent of this family proposes starts with: "agent-<family>-".
std::string agent_proposal_prefix(const std::string& agent_family);

// Whether a manifest id names a proposal of some agent.
bool is_agent_proposal(const std::string& manifest_id);

// Whether a manifest id names a proposal of the agent of this family.
bool is_proposal_of_agent(const std::string& manifest_id, const std::string& agent_family);

// The family of the manifests an agent of this family proposes: "kernel" for "vae" (the VAE's kernel
// switches only), the family itself otherwise.
std::string agent_manifest_family(const std::string& agent_family);

// Where an agent's executor keeps the plugins its agent handed over (issue 42): OUTBOX/plugins, each file named by
// its sha256 (OUTBOX/plugins/<sha256>.so), where the orchestrator and the report find them.
std::string agent_plugins_dir(const std::string& outbox);
std::string agent_plugin_file(const std::string& outbox, const std::string& sha256);

// Who proposed a manifest, as the gate's round robin takes turns: "<family>:agent" for an agent's
// proposal (its turns are its own, beside its family's built-in searcher), the manifest's family otherwise.
std::string proposal_source(const std::string& manifest_family, const std::string& manifest_id);

}  // namespace autooptim::gates
