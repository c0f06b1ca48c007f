#pragma once
// An agent executor (docs/agents.md): a command (a coding agent such as `claude -p`, or a script) that
// searches one family in a sandbox and asks the run for trials through the agent tools. This is what the
// orchestrator tells the executor process that hosts it.
#include <string>
#include <vector>

#include "gates/agent_names.h"

namespace autooptim::executors {

// The families an agent may take: the executors' four, and "vae" (kernel switches of the VAE only).
const std::vector<std::string>& agent_families();

struct AgentSpec {
  std::string family;                  // one of agent_families(); the brief prompts/agents/<family>.md
  std::string command;                 // run by /bin/sh -c; {brief}, {workspace}, {family} expanded
  std::string network;                 // "HOST:PORT": the one endpoint the agent may reach ("" none)
  std::vector<std::string> env_names;  // host variables passed in (an API key)
  std::vector<std::string> binds;      // host paths bound read-only at the same path
  std::vector<std::string> decoys;     // paths (held-out prompts, the ledger) where a watched decoy stands
  bool unsandboxed = false;            // the user allowed running without the sandbox
  std::string brief_template;          // path of the brief's template
  std::string agent_dir;               // OUT/agents/<name>: workspace, channel, transcript
  double deadline_s = 0;               // wall seconds the agent may run (0: until stopped)
  int64_t max_proposals = 10;

  bool empty() const { return command.empty(); }
  // The executor's name in the run, its outbox and its client id: "agent-<family>" (gates/agent_names.h).
  std::string name() const { return gates::agent_executor_name(family); }
  // What the names of the manifests it proposes start with: "agent-<family>-".
  std::string proposal_prefix() const { return gates::agent_proposal_prefix(family); }
  // The family of the manifests it proposes ("kernel" for vae).
  std::string manifest_family() const { return gates::agent_manifest_family(family); }
};

// "FAMILY=COMMAND" (a --agent value) -> {family, command}; Error naming the problem otherwise.
AgentSpec parse_agent_arg(const std::string& arg);

}  // namespace autooptim::executors
