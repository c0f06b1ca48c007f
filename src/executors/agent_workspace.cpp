#include "executors/agent_workspace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "base/remove_tree.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/strings.h"
#include "runtime/techniques/registry.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

namespace tech = runtime::techniques;

std::string number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// The family's techniques, one line each with its flags and their defaults.
std::string techniques_text(const std::string& family) {
  std::string out;
  for (const auto& t : tech::all()) {
    if (!agent_may_use(family, t)) continue;
    out += "- " + t.name + (t.lossless ? " (lossless)" : " (lossy)") + ": " + t.summary + "\n  flags:";
    for (const auto& f : t.flags) out += " " + t.path_of(f) + "=" + f.default_value().dump();
    out += "\n";
  }
  return out.empty() ? "(none registered for this family)\n" : out;
}

std::string config_text(const gates::RunConfig& c) {
  return std::to_string(c.frames) + " frames at " + std::to_string(c.height) + "x" + std::to_string(c.width) + ", " +
         std::to_string(c.steps) + " steps, guidance " + number(c.guidance) + ", seed " + std::to_string(c.seed);
}

void write_text(const fs::path& p, const std::string& text) { gates::write_file_atomic(p.string(), text); }

}  // namespace

bool agent_may_use(const std::string& family, const tech::Technique& t) {
  if (family == "vae") return t.name.rfind("vae_", 0) == 0;
  return t.family == family;
}

BriefFacts brief_facts(const AgentSpec& a, const gates::Manifest& base, bool on_gpu, int64_t budget_trials,
                       double min_psnr, double min_ssim, size_t visible_prompts) {
  const bool official = base.config == gates::official_config(base.model);
  BriefFacts f;
  f.values = {{"family", a.family},
              {"model", base.model},
              {"config", config_text(base.config)},
              {"official", official ? "This is the model's official configuration: tiers can be won here."
                                    : "This is a reduced configuration, not the official one: candidates are "
                                      "measured and gated, but no tier can be won."},
              {"device", on_gpu ? "cuda (a GPU)" : "cpu"},
              {"budget_trials", std::to_string(budget_trials)},
              {"deadline_minutes", a.deadline_s > 0 ? number(a.deadline_s / 60.0) : "no limit"},
              {"min_psnr", number(min_psnr)},
              {"min_ssim", number(min_ssim)},
              {"visible_prompts", std::to_string(visible_prompts)},
              {"techniques", techniques_text(a.family)}};
  return f;
}

std::string render_brief(const std::string& tmpl, const BriefFacts& facts, const std::string& label) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t open = tmpl.find("{{", pos);
    if (open == std::string::npos) break;
    const size_t close = tmpl.find("}}", open + 2);
    if (close == std::string::npos) throw Error(label + ": a '{{' without its '}}'");
    const std::string key = tmpl.substr(open + 2, close - open - 2);
    const auto it = facts.values.find(key);
    if (it == facts.values.end()) throw Error(label + ": unknown placeholder {{" + key + "}}");
    out += tmpl.substr(pos, open - pos) + it->second;
    pos = close + 2;
  }
  return out + tmpl.substr(pos);
}

bool reachable_by_others(const std::string& path) {
  fs::path p = fs::absolute(path);
  for (p = p.parent_path(); !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
    if (p == p.root_path()) break;
  }
  return true;
}

void finish_agent_folders(const AgentFolders& f) {
  if (!f.staged()) return;
  std::error_code ec;
  const auto how = fs::copy_options::recursive | fs::copy_options::copy_symlinks | fs::copy_options::overwrite_existing;
  fs::copy(f.workspace, fs::path(f.root) / "workspace", how, ec);
  fs::copy(f.transcript, fs::path(f.root) / "transcript.log", fs::copy_options::overwrite_existing, ec);
  runtime::remove_tree(f.live, ec);
}

AgentFolders prepare_agent_folders(const AgentSpec& a, const gates::Manifest& base,
                                   const std::vector<gates::Prompt>& visible, const std::string& brief) {
  for (const auto& p : visible)
    for (const auto& s : p.splits)
      if (s.rfind("heldout", 0) == 0)
        throw Error("agent " + a.name() + ": a held-out prompt reached its host (" + p.id + ")");
  AgentFolders f;
  f.root = a.agent_dir;
  fs::create_directories(f.root);
  f.live = f.root;
  if (::geteuid() == 0 && !reachable_by_others(f.root)) {
    std::string tmpl = "/tmp/autooptim-agent-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw Error("agent " + a.name() + ": cannot make a staging folder in /tmp");
    ::chmod(tmpl.c_str(), 0711);
    f.live = tmpl;
  }
  const fs::path root = f.live;
  f.workspace = (root / "workspace").string();
  f.requests = (root / "requests").string();
  f.replies = (root / "replies").string();
  f.transcript = (root / "transcript.log").string();
  const std::string kept = (fs::path(f.root) / "workspace").string();  // an earlier attempt's
  if (fs::exists(kept)) {
    int n = 1;
    while (fs::exists(kept + "." + std::to_string(n))) ++n;
    fs::rename(kept, kept + "." + std::to_string(n));
  }
  for (const auto& d : {f.requests, f.replies}) runtime::remove_tree(d);
  for (const auto& d : {f.workspace, f.requests, f.replies}) fs::create_directories(d);
  const fs::path ws = f.workspace;
  write_text(ws / "BRIEF.md", brief);
  write_text(ws / "baseline.json", gates::to_json(base).dump(2) + "\n");
  write_text(ws / "techniques.json", tech::registry_to_json().dump(2) + "\n");
  std::string lines;
  for (const auto& p : visible)
    lines += json{{"id", p.id}, {"category", p.category}, {"prompt", p.text}, {"splits", p.splits}}.dump() + "\n";
  write_text(ws / "prompts.jsonl", lines);
  return f;
}

}  // namespace autooptim::executors
