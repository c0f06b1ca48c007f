#pragma once
// The one channel between an agent in its sandbox and the run (docs/agents.md): the agent tools write a
// request file into the requests folder (the only folder of the host it may write besides its workspace)
// and wait for the reply the host writes into the replies folder (read-only inside). The host reads
// nothing else the agent wrote: a request is a small JSON object of known keys for one of seven tools,
// parsed strictly; anything else is refused and recorded as blocked.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace autooptim::executors {

// techniques, trial, calibrate, budget, propose, plugin, log.
const std::vector<std::string>& agent_tools();

// Largest request file the host reads.
constexpr int64_t kMaxAgentRequestBytes = 256 * 1024;

struct AgentToolRequest {
  std::string tool;
  nlohmann::json manifest;              // trial, propose: the agent's manifest file's JSON; null otherwise
  int64_t prompts = 0;                  // trial: the first N visible prompts (0: prompt_ids, or the first one)
  std::vector<std::string> prompt_ids;  // trial: these visible prompts
  std::string why;                      // propose
  std::string text;                     // log
  std::string technique;                // calibrate: a technique with a calibration (magcache, teacache)
  std::string file;                     // plugin: a file's name in the top folder of the agent's workspace

  nlohmann::json to_json() const;
  // Strict: every key present with its type, no other key, a known tool. Error naming the key otherwise.
  static AgentToolRequest from_json(const nlohmann::json& j);
};

struct AgentToolReply {
  bool ok = false;
  std::string error;  // why the host refused or failed the call
  nlohmann::json result;

  nlohmann::json to_json() const;
  static AgentToolReply from_json(const nlohmann::json& j);
};

// Inside the sandbox: sends `r` and waits for its reply (Error after timeout_s, 0: no limit).
AgentToolReply call_agent_host(const std::string& requests_dir, const std::string& replies_dir,
                               const AgentToolRequest& r, double timeout_s = 0);

// Outside: the host's end.
class AgentChannel {
 public:
  AgentChannel(std::string requests_dir, std::string replies_dir);

  struct Incoming {
    std::string name;                         // the request file's name (the reply gets the same)
    std::optional<AgentToolRequest> request;  // unset when the file was not a valid request
    std::string problem;                      // why not
  };
  // The requests waiting, oldest first, at most `max`, each removed from the folder as it is read. A
  // symbolic link, a folder, an oversized file or a file that does not parse is an Incoming with a problem.
  std::vector<Incoming> take(size_t max = 16);
  void reply(const std::string& name, const AgentToolReply& r) const;

 private:
  std::string requests_, replies_;
};

}  // namespace autooptim::executors
