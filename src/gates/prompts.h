#pragma once
// The evaluation prompts: 80 prompts in 8 failure categories, in nested splits. The visible file
// (smoke in val in core) is what executors search on; the held-out file (heldout16 in heldout60) is
// read only by the gates, and is pinned by its SHA-256 so a silent edit is detected.
#include <cstddef>
#include <string>
#include <vector>

namespace autooptim::gates {

// SHA-256 of prompts/heldout.jsonl as shipped; load_prompts refuses any other content.
extern const char kHeldoutSha256[];
// A model's own prompt set (prompts/wan22-tiny) is pinned in the model table (models/model_facts.h,
// PromptPin); load_prompts holds a folder of that name to it.

struct Prompt {
  std::string id;        // "mh-01"
  std::string category;  // one of prompt_categories()
  std::string text;
  std::vector<std::string> splits;  // every split the prompt belongs to
};

// Prompt ids name files and folders of a run (videos/<id>-<seed>.mp4, cache/.../<id>-<seed>): only
// [A-Za-z0-9._-], at most kMaxPromptIdLength characters, no leading dot (so never "..", "." or hidden).
constexpr size_t kMaxPromptIdLength = 64;
bool valid_prompt_id(const std::string& id);

const std::vector<std::string>& prompt_categories();
const std::vector<std::string>& visible_splits();  // smoke, val, core
const std::vector<std::string>& heldout_splits();  // heldout16, heldout60

// One JSON object per line: {"id","category","prompt","splits"}. Errors name file:line.
std::vector<Prompt> load_prompt_file(const std::string& path);

class PromptSet {
 public:
  PromptSet() = default;
  PromptSet(std::vector<Prompt> prompts, bool includes_heldout);

  // The prompts of a split, in file order. An unknown name is an error listing the valid ones; a
  // held-out name is an error when the held-out prompts were not loaded.
  std::vector<Prompt> split(const std::string& name) const;
  const std::vector<Prompt>& all() const { return prompts_; }
  bool includes_heldout() const { return includes_heldout_; }

 private:
  std::vector<Prompt> prompts_;
  bool includes_heldout_ = false;
};

// Loads <dir>/visible.jsonl and, when include_heldout, <dir>/heldout.jsonl after checking its pin.
// Also checks the split structure: each file holds only its own splits, the nesting is listed
// consistently on every prompt, and no id or prompt text appears twice.
PromptSet load_prompts(const std::string& prompts_dir, bool include_heldout);

}  // namespace autooptim::gates
