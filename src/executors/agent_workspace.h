#pragma once
// An agent's folder in the run (OUT/agents/<name>/): the workspace it may write (BRIEF.md, baseline.json,
// techniques.json, prompts.jsonl, and whatever it makes), the channel's request and reply folders, and its
// transcript. Nothing else of the run is put there: the sandbox shows the agent this folder's workspace
// and request folder, and nothing of the run folder around it.
#include <map>
#include <string>
#include <vector>

#include "executors/agent_spec.h"
#include "gates/manifest.h"
#include "gates/prompts.h"
#include "runtime/techniques/registry.h"

namespace autooptim::executors {

// The folders live in `root`, or, when this process is root and the sandbox's unprivileged uid could not
// reach `root` (a run folder under a 0700 home), in a staging folder under /tmp that it can reach, copied
// into `root` when the agent has ended (finish_agent_folders).
struct AgentFolders {
  std::string root;        // OUT/agents/<name>
  std::string live;        // where the folders below are: root, or the staging folder
  std::string workspace;   // live/workspace: /workspace inside
  std::string requests;    // live/requests: /channel inside (the only other folder it may write)
  std::string replies;     // live/replies: /replies inside, read-only
  std::string transcript;  // live/transcript.log: the agent's stdout and stderr
  bool staged() const { return live != root; }
};

// Whether a process of another, unprivileged uid can reach `path` (every folder above it searchable by others).
bool reachable_by_others(const std::string& path);

// Whether an agent of `family` may use technique t: its family's techniques (vae: the kernel family's vae_* ones).
bool agent_may_use(const std::string& family, const runtime::techniques::Technique& t);

// What the brief's placeholders are filled with ({{model}}, {{config}}, ...: docs/agents.md).
struct BriefFacts {
  std::map<std::string, std::string> values;
};

// The brief's facts for this run: model, configuration, device, budget, floors, the family's techniques.
BriefFacts brief_facts(const AgentSpec& a, const gates::Manifest& base, bool on_gpu, int64_t budget_trials,
                       double min_psnr, double min_ssim, size_t visible_prompts);

// `tmpl` with every {{key}} replaced; Error naming a placeholder the facts do not have.
std::string render_brief(const std::string& tmpl, const BriefFacts& facts, const std::string& label);

// Copies a staged agent's workspace and transcript into f.root (links copied as links, never followed) and
// removes the staging folder; nothing when not staged.
void finish_agent_folders(const AgentFolders& f);

// Makes the folders afresh (a workspace of an earlier, interrupted attempt is moved to workspace.<n>) and
// writes the workspace's files. The visible prompts must hold no held-out prompt (Error otherwise).
AgentFolders prepare_agent_folders(const AgentSpec& a, const gates::Manifest& base,
                                   const std::vector<gates::Prompt>& visible, const std::string& brief);

}  // namespace autooptim::executors
