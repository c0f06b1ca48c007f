#pragma once
// An executor's outbox (OUT/outbox/<executor>/): the trials it measured (trials.jsonl) and the manifests it
// proposes, one file each, written atomically, in the order it ranks them (proposals.txt). The orchestrator
// gates what is there; nothing in an outbox is trusted before the gate has parsed it again.
#include <nlohmann/json.hpp>

#include <string>

#include "gates/manifest.h"
#include "workers/trial_result.h"

namespace autooptim::executors {

// A patch of `base` for `family` named `name` (id MODEL/FAMILY/NAME) with these flags, parsed as every manifest is
// (Error naming the problem, labelled `label`).
gates::Manifest patch_of(const gates::Manifest& base, const std::string& family, const std::string& name,
                         const nlohmann::json& flags, bool lossless, const std::string& why, const std::string& label);

class Outbox {
 public:
  // `family`: the manifests' family; `prefix`: put before every slug (an agent's "agent-<family>-",
  // gates/agent_names.h), so that two executors of one family never write the same file.
  Outbox(const std::string& dir, const gates::Manifest& base, std::string family, std::string prefix = "");

  // Appends the trial to trials.jsonl and prints one line on stderr.
  void log(const workers::TrialResult& t);
  // Writes a patch manifest of the family with these flags and returns its path.
  std::string propose(const std::string& slug, const nlohmann::json& flags, bool lossless, const std::string& why);
  int proposed() const { return proposed_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  gates::Manifest base_;
  std::string family_, prefix_;
  int proposed_ = 0;
};

}  // namespace autooptim::executors
