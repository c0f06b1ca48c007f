#pragma once
// The executor process that hosts an agent (docs/agents.md): it prepares the agent's workspace and brief,
// starts the agent's command in a sandbox (base/sandbox.h), serves the agent's tool calls over the
// channel (agent_channel.h, agent_tools.h) with trials on the run's workers, and stops the sandbox when
// the exploration ends. What the agent proposed is in its outbox like any executor's.
#include "executors/executor.h"

namespace autooptim::executors {

// Runs req.agent to its end, its deadline or a stop; returns the number of manifests it proposed.
int run_agent_executor(const ExecutorRequest& req);

}  // namespace autooptim::executors
