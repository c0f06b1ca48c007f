#pragma once
// The agent options of `run` (--agent FAMILY=COMMAND and the sandbox's openings) and of the `executor`
// process that hosts one agent (docs/agents.md).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "executors/agent_spec.h"
#include "orchestrator/orchestrator.h"

namespace autooptim::app {

struct RunAgentArgs {
  std::vector<std::string> agents;  // FAMILY=COMMAND as given
};

void add_run_agent_options(CLI::App* cmd, const std::shared_ptr<orchestrator::RunRequest>& req,
                           const std::shared_ptr<RunAgentArgs>& args);
// The agents parsed into the request, the brief templates found, and the sandbox checked: Error when an
// agent is asked for where no sandbox can be made, unless --agent-unsandboxed.
void complete_run_agents(orchestrator::RunRequest& req, const RunAgentArgs& args, CLI::App* cmd);

void add_executor_agent_options(CLI::App* cmd, const std::shared_ptr<executors::AgentSpec>& agent);

}  // namespace autooptim::app
