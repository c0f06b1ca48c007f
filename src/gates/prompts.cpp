#include "gates/prompts.h"
#include "base/strings.h"

#include <algorithm>
#include <fstream>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "base/error.h"
#include "base/json_read.h"
#include "models/model_table.h"

namespace fs = std::filesystem;

namespace autooptim::gates {

// Update only together with a deliberate, reviewed change of prompts/heldout.jsonl.
const char kHeldoutSha256[] = "9a63cc0217bb3eedad1e52026e2d0937843b0aa01b56cc3edc2b760dd2c85806";

namespace {

using nlohmann::json;

// Each split and the next larger split that must contain it.
const std::vector<std::pair<std::string, std::string>> kNesting = {
    {"smoke", "val"}, {"val", "core"}, {"heldout16", "heldout60"}};

using base::join;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<std::string> all_splits() {
  std::vector<std::string> names = visible_splits();
  for (const auto& n : heldout_splits()) names.push_back(n);
  return names;
}

Prompt parse_prompt_line(const std::string& line, const std::string& where) {
  const json j = runtime::parse_json_text(line, where);
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  const std::vector<std::string> keys = {"id", "category", "prompt", "splits"};
  for (const auto& item : j.items()) {
    if (!contains(keys, item.key())) throw Error(where + ": unknown key '" + item.key() + "'");
  }
  for (const auto& k : keys) {
    if (!j.contains(k)) throw Error(where + ": missing key '" + k + "'");
  }
  auto text_field = [&](const char* key) {
    if (!j[key].is_string() || j[key].get<std::string>().empty()) {
      throw Error(where + ": " + key + ": expected a non-empty string");
    }
    return j[key].get<std::string>();
  };
  Prompt p;
  p.id = text_field("id");
  if (!valid_prompt_id(p.id)) {
    std::string shown = p.id.substr(0, 80);
    for (auto& ch : shown)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';  // a NUL would end what()
    throw Error(where + ": id: '" + shown + "' is not a valid prompt id (it names files: " +
                std::to_string(kMaxPromptIdLength) + " characters at most of [A-Za-z0-9._-], not starting with a dot)");
  }
  p.category = text_field("category");
  p.text = text_field("prompt");
  if (!contains(prompt_categories(), p.category)) {
    throw Error(where + ": category: '" + p.category + "' is not one of: " + join(prompt_categories()));
  }
  if (!j["splits"].is_array() || j["splits"].empty()) {
    throw Error(where + ": splits: expected a non-empty array of split names");
  }
  for (const auto& s : j["splits"]) {
    if (!s.is_string() || !contains(all_splits(), s.get<std::string>())) {
      throw Error(where + ": splits: " + s.dump() + " is not one of: " + join(all_splits()));
    }
    if (contains(p.splits, s.get<std::string>())) {
      throw Error(where + ": splits: '" + s.get<std::string>() + "' is listed twice");
    }
    p.splits.push_back(s.get<std::string>());
  }
  for (const auto& [inner, outer] : kNesting) {
    if (contains(p.splits, inner) && !contains(p.splits, outer)) {
      throw Error(where + ": splits: '" + inner + "' is nested in '" + outer + "', which is not listed");
    }
  }
  return p;
}

// Every prompt of a file must belong only to that file's splits.
void check_file_splits(const std::vector<Prompt>& prompts, const std::string& path,
                       const std::vector<std::string>& allowed) {
  for (const auto& p : prompts) {
    for (const auto& s : p.splits) {
      if (!contains(allowed, s)) {
        throw Error(path + ": prompt '" + p.id + "' is in split '" + s + "', which does not belong in this file");
      }
    }
  }
}

}  // namespace

bool valid_prompt_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxPromptIdLength || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

const std::vector<std::string>& prompt_categories() {
  static const std::vector<std::string> kCategories = {"motion-heavy",      "low-motion",     "fine-detail",
                                                       "human-subject",     "camera-moves",   "animal-anatomy",
                                                       "hands-interaction", "ambiguous-short"};
  return kCategories;
}

const std::vector<std::string>& visible_splits() {
  static const std::vector<std::string> kSplits = {"smoke", "val", "core"};
  return kSplits;
}

const std::vector<std::string>& heldout_splits() {
  static const std::vector<std::string> kSplits = {"heldout16", "heldout60"};
  return kSplits;
}

std::vector<Prompt> load_prompt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open prompt file");
  std::vector<Prompt> prompts;
  std::set<std::string> ids;
  std::string line;
  for (size_t line_no = 1; std::getline(in, line); ++line_no) {
    // JSON Lines has no byte-order mark; one would be read as part of the first line by some readers and
    // skipped by others (nlohmann skips it), so the same file must not mean two things.
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0)
      throw Error(path + ":1: starts with a UTF-8 byte-order mark; save the file as UTF-8 without one");
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    Prompt p = parse_prompt_line(line, where);
    if (!ids.insert(p.id).second) throw Error(where + ": id '" + p.id + "' appears twice");
    prompts.push_back(std::move(p));
  }
  if (in.bad()) throw Error(path + ": read error");
  return prompts;
}

PromptSet::PromptSet(std::vector<Prompt> prompts, bool includes_heldout)
    : prompts_(std::move(prompts)), includes_heldout_(includes_heldout) {}

std::vector<Prompt> PromptSet::split(const std::string& name) const {
  if (!contains(all_splits(), name)) {
    throw Error("unknown prompt split '" + name + "'; valid splits: " + join(all_splits()));
  }
  if (contains(heldout_splits(), name) && !includes_heldout_) {
    throw Error("prompt split '" + name + "' is held out and was not loaded (only the gates read it)");
  }
  std::vector<Prompt> out;
  for (const auto& p : prompts_) {
    if (contains(p.splits, name)) out.push_back(p);
  }
  return out;
}

PromptSet load_prompts(const std::string& prompts_dir, bool include_heldout) {
  const std::string visible_path = prompts_dir + "/visible.jsonl";
  std::vector<Prompt> prompts = load_prompt_file(visible_path);
  check_file_splits(prompts, visible_path, visible_splits());
  if (include_heldout) {
    const std::string heldout_path = prompts_dir + "/heldout.jsonl";
    const std::string actual = sha256_file_hex(heldout_path);
    // The harness's set (prompts/) is pinned here; a model's own set (the model table's PromptPin, e.g.
    // prompts/wan22-tiny/: captions of its data set that it was never trained on) to the table's pin, by
    // the folder's name.
    fs::path dir = fs::path(prompts_dir).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    const models::ModelFacts* owner = models::model_with_prompt_folder(dir.filename().string());
    const std::string pinned = owner ? owner->own_prompts->heldout_sha256 : std::string(kHeldoutSha256);
    if (actual != pinned) {
      throw Error(heldout_path + " has changed (sha256 " + actual + " != pinned " + pinned + "); refusing");
    }
    std::vector<Prompt> heldout = load_prompt_file(heldout_path);
    check_file_splits(heldout, heldout_path, heldout_splits());
    std::set<std::string> ids, texts;
    for (const auto& p : prompts) ids.insert(p.id), texts.insert(p.text);
    for (const auto& p : heldout) {
      if (ids.count(p.id)) throw Error(heldout_path + ": id '" + p.id + "' is also in " + visible_path);
      if (texts.count(p.text)) {
        throw Error(heldout_path + ": prompt '" + p.id + "' repeats a visible prompt's text");
      }
    }
    prompts.insert(prompts.end(), heldout.begin(), heldout.end());
  }
  return PromptSet(std::move(prompts), include_heldout);
}

}  // namespace autooptim::gates
