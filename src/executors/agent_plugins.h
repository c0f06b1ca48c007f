#pragma once
// The technique plugins an agent hands its run (issue 42). `autooptim agent plugin FILE.so` names a file in the top
// folder of the agent's workspace (built there by `autooptim agent build`); the host copies it, never following a
// link, into the agent's outbox as plugins/<sha256>.so, where the orchestrator and the workers find it, and has a
// sandboxed generation worker describe its techniques (gates/plugin_schema.h), so that their flags are valid in the
// agent's manifests from then on. The host never loads it: the plugin's code runs only in sandboxed workers.
#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "base/error.h"
#include "workers/messages.h"

namespace autooptim::executors {

// Largest plugin file and most plugins an agent may hand over.
constexpr int64_t kMaxPluginBytes = 256LL << 20;
constexpr int kMaxAgentPlugins = 16;

// A hand-over that would break the harness's rules (a path out of the workspace, a link): refused and recorded as
// blocked, where other refusals (not a plugin, too large) are the agent's mistakes.
struct PluginBreach : Error {
  using Error::Error;
};

class AgentPlugins {
 public:
  // `workspace`: the agent's workspace on this host; `outbox`: its outbox (the copies go to outbox/plugins);
  // `without_sandbox`: on a machine with no OS sandbox, describe and run the plugins in plain processes.
  AgentPlugins(std::string workspace, const std::string& outbox, bool without_sandbox);
  // Takes the workspace's file `name`: {"plugin": sha256, "file", "techniques": [its techniques' listing]}.
  // Error naming the problem (not a plain name, a link, too large, not a plugin, a technique the registry refuses).
  nlohmann::json take(const std::string& name);
  // The run's copy of plugin `sha256`, for a trial's request (none for ""); Error when it was never handed over.
  workers::PluginRef ref(const std::string& sha256) const;

 private:
  std::string workspace_, outbox_;
  bool without_sandbox_;
  std::map<std::string, std::string> files_;  // sha256 -> the copy
};

}  // namespace autooptim::executors
