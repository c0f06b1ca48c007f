#include "agent_args.h"

#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "base/sandbox.h"
#include "data_dirs.h"

namespace fs = std::filesystem;

namespace autooptim::app {

void add_run_agent_options(CLI::App* cmd, const std::shared_ptr<orchestrator::RunRequest>& req,
                           const std::shared_ptr<RunAgentArgs>& args) {
  const char* group = "Agents (docs/agents.md)";
  cmd->add_option("--agent", args->agents,
                  "FAMILY=COMMAND: a coding agent as that family's executor, in a sandbox (repeatable; FAMILY: kernel, "
                  "cache, sparse, quant, vae; COMMAND may use {brief}, {workspace}, {family})")
      ->group(group);
  cmd->add_flag("--agent-only", req->agent_only,
                "The families with an agent run only their agent, not the built-in searcher")
      ->group(group);
  cmd->add_option("--agent-network", req->agent_network,
                  "HOST:PORT: the one endpoint the agents may reach (their model's API); none by default")
      ->group(group);
  cmd->add_option("--agent-env", req->agent_env, "A host environment variable passed into the sandboxes (repeatable)")
      ->group(group);
  cmd->add_option("--agent-bind", req->agent_binds, "A host path bound read-only at the same path (repeatable)")
      ->group(group);
  cmd->add_flag("--agent-unsandboxed", req->agent_unsandboxed,
                "Run agents without a sandbox where user namespaces are unavailable (the report warns)")
      ->group(group);
}

void complete_run_agents(orchestrator::RunRequest& req, const RunAgentArgs& args, CLI::App* cmd) {
  for (const auto& a : args.agents) {
    const executors::AgentSpec s = executors::parse_agent_arg(a);
    for (const auto& other : req.agents)
      if (other.family == s.family) throw Error("--agent " + s.family + "=...: one agent per family");
    req.agents.push_back({s.family, s.command});
  }
  if (req.agents.empty()) {
    for (const char* o : {"--agent-only", "--agent-network", "--agent-env", "--agent-bind", "--agent-unsandboxed"})
      if (cmd->count(o) > 0) throw Error(std::string(o) + " needs --agent FAMILY=COMMAND");
    return;
  }
  if (!req.agent_network.empty()) {
    const auto colon = req.agent_network.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == req.agent_network.size() ||
        req.agent_network.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      throw Error("--agent-network '" + req.agent_network + "': expected HOST:PORT (e.g. api.anthropic.com:443)");
  }
  for (const auto& b : req.agent_binds) {
    if (!fs::path(b).is_absolute() || !fs::exists(b))
      throw Error("--agent-bind " + b + ": not an absolute path that exists");
    // Nothing the harness keeps from the agents may come in through a bind.
    for (const std::string& kept : {req.prompts_dir, req.manifests_dir, req.out_dir}) {
      const std::string k = fs::weakly_canonical(fs::absolute(kept)).string(), c = fs::weakly_canonical(b).string();
      if (k == c || k.rfind(c + "/", 0) == 0 || c.rfind(k + "/", 0) == 0)
        throw Error("--agent-bind " + b + ": it would show the agents " + kept +
                    " (the prompts, the manifests or the run folder)");
    }
  }
  const std::string why_not = base::sandbox_unavailable_reason();
  if (!why_not.empty() && !req.agent_unsandboxed)
    throw Error("--agent: no sandbox can be made on this machine (" + why_not +
                "); --agent-unsandboxed runs the agents without one (the report warns)");
  if (!why_not.empty()) log::warn("agents run WITHOUT a sandbox (--agent-unsandboxed): " + why_not);
  req.agent_briefs_dir = (fs::path(find_data_dir("prompts", "", false)) / "agents").string();
  for (const auto& a : req.agents)
    if (!fs::exists(fs::path(req.agent_briefs_dir) / (a.family + ".md")))
      throw Error("--agent " + a.family + ": no brief template " + req.agent_briefs_dir + "/" + a.family + ".md");
}

void add_executor_agent_options(CLI::App* cmd, const std::shared_ptr<executors::AgentSpec>& a) {
  cmd->add_option("--agent-family", a->family, "An agent's family (its brief)")
      ->check(CLI::IsMember(executors::agent_families()));
  cmd->add_option("--agent-command", a->command, "The agent's command (run by /bin/sh -c in the sandbox)");
  cmd->add_option("--agent-brief", a->brief_template, "The brief's template")->check(CLI::ExistingFile);
  cmd->add_option("--agent-dir", a->agent_dir, "The agent's folder (workspace, channel, transcript)");
  cmd->add_option("--agent-deadline-s", a->deadline_s, "Wall seconds the agent may run")->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--agent-network", a->network, "HOST:PORT the agent may reach");
  cmd->add_option("--agent-env", a->env_names, "A host variable passed in (repeatable)");
  cmd->add_option("--agent-bind", a->binds, "A host path bound read-only (repeatable)");
  cmd->add_option("--agent-decoy", a->decoys, "A path where a watched decoy stands inside (repeatable)");
  cmd->add_flag("--agent-unsandboxed", a->unsandboxed, "Without a sandbox where none can be made");
}

}  // namespace autooptim::app
