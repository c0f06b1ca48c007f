#pragma once
// What the host does for each tool call of its agent: the channel's policy (docs/agents.md). A trial runs
// on visible prompts only and is charged to the family's budget; a proposal becomes a patch manifest of the
// family in the outbox; everything is recorded (outbox/<name>/tools.jsonl), and what the policy refuses
// because it would break the harness's rules is recorded as blocked (blocked.jsonl) for the report.
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "executors/agent_channel.h"
#include "executors/agent_plugins.h"
#include "executors/agent_workspace.h"
#include "executors/executor.h"
#include "executors/outbox.h"
#include "executors/trial_runner.h"

namespace autooptim::executors {

// The agent's record in its outbox: its tool calls, what was blocked, and its time on the workers.
class AgentRecord {
 public:
  explicit AgentRecord(std::string outbox_dir);
  void call(const std::string& tool, const nlohmann::json& args, const AgentToolReply& reply, double seconds);
  void blocked(const std::string& what, const std::string& detail);
  int64_t calls() const { return calls_; }
  int64_t blocks() const { return blocks_; }
  double trial_s = 0;  // wall seconds its trials kept the workers busy

 private:
  std::string dir_;
  std::chrono::steady_clock::time_point start_;
  int64_t calls_ = 0, blocks_ = 0;
};

// Tool calls an agent may make in a run (each is a line of tools.jsonl).
constexpr int64_t kMaxAgentToolCalls = 5000;

class AgentTools {
 public:
  AgentTools(const ExecutorRequest& req, TrialRunner& run, Outbox& box, AgentRecord& record, AgentPlugins& plugins);
  // Handles one request: the reply to send back (recorded, with what it blocked).
  AgentToolReply handle(const AgentToolRequest& r);
  // Seconds left before the agent's deadline (a large number when it has none).
  double wall_left_s() const;

 private:
  struct Refusal {
    std::string error;
    bool blocked = false;  // a breach of the harness's rules, not a mistake
  };
  nlohmann::json techniques() const;
  nlohmann::json trial(const AgentToolRequest& r);
  nlohmann::json calibrate(const AgentToolRequest& r);
  nlohmann::json budget() const;
  nlohmann::json propose(const AgentToolRequest& r);
  nlohmann::json plugin(const AgentToolRequest& r);
  // The agent's manifest file ({"flags": ...} or a patch manifest at the run's configuration) as a patch of the
  // family, checked as one would be (its flags; its plugin pin where they turn a plugin's technique on); throws
  // Refusal.
  gates::Manifest patch_of_file(const nlohmann::json& manifest) const;
  std::vector<gates::Prompt> prompts_of(const AgentToolRequest& r) const;

  const ExecutorRequest& req_;
  TrialRunner& run_;
  Outbox& box_;
  AgentRecord& record_;
  AgentPlugins& plugins_;
  gates::Manifest base_;
  std::chrono::steady_clock::time_point start_;
  int64_t trials_ = 0;
  bool limit_named_ = false;
};

}  // namespace autooptim::executors
