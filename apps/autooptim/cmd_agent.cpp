// autooptim agent <tool>: the tools an agent calls from inside its sandbox (docs/agents.md). Each sends one
// request over the agent's channel to its host (the executor process outside the sandbox) and prints the
// host's JSON reply: exit 0 when it was carried out, 1 when the host refused or failed it ("error" says
// why), 2 when the call could not be made (outside a sandbox, a missing manifest file).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "base/json_read.h"
#include "commands.h"
#include "executors/agent_channel.h"

namespace autooptim::app {
namespace {

using executors::AgentToolReply;
using executors::AgentToolRequest;

std::string env_or_fail(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    throw Error(std::string("autooptim agent: not inside an agent's sandbox (") + name +
                " is not set; `autooptim run --agent FAMILY=COMMAND` starts agents)");
  return v;
}

// The manifest file's JSON (a request carries it; the host checks it).
nlohmann::json read_manifest_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the manifest file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > static_cast<size_t>(executors::kMaxAgentRequestBytes) / 2)
    throw Error(path + ": larger than a manifest can be");
  return runtime::parse_json_text(ss.str(), path);
}

void send(const AgentToolRequest& r) {
  const AgentToolReply reply =
      executors::call_agent_host(env_or_fail("AUTOOPTIM_AGENT_CHANNEL"), env_or_fail("AUTOOPTIM_AGENT_REPLIES"), r);
  if (reply.ok) {
    std::cout << reply.result.dump(2) << "\n";
  } else {
    std::cout << nlohmann::json{{"error", reply.error}}.dump(2) << "\n";
    exit_status() = 1;
  }
}

// The name of `path` in the top folder of the workspace (the agent's HOME), which is where the host reads it.
std::string workspace_file_name(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path home = env_or_fail("HOME");
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  if (!fs::is_regular_file(p, ec)) throw Error(path + ": no such file");
  if (!fs::equivalent(p.parent_path(), home, ec))
    throw Error(path + ": the run takes a plugin from your workspace's top folder (" + home.string() + ") only");
  return p.filename().string();
}

struct ToolArgs {
  std::string manifest, why, text, technique, file;
  int64_t prompts = 0;
  std::vector<std::string> prompt_ids;
};

}  // namespace

void add_agent(CLI::App& app) {
  auto* cmd = app.add_subcommand("agent", "The tools of an agent executor, called from inside its sandbox");
  cmd->require_subcommand(1);
  auto a = std::make_shared<ToolArgs>();
  auto simple = [&](const char* tool, const char* help) {
    cmd->add_subcommand(tool, help)->callback([tool] {
      AgentToolRequest r;
      r.tool = tool;
      send(r);
    });
  };
  simple("techniques", "The technique registry's listing (JSON)");
  simple("budget", "Trials used and left, wall seconds left, trial seconds used");
  auto* trial = cmd->add_subcommand("trial", "Measure a manifest's flags against the baseline on visible prompts");
  trial->add_option("--manifest", a->manifest, "JSON file: {\"flags\": {...}} or a patch manifest")->required();
  trial->add_option("--prompts", a->prompts, "The first N visible prompts (default 1)")->check(CLI::Range(1, 100000));
  trial->add_option("--prompt", a->prompt_ids, "A visible prompt by id (repeatable)");
  trial->callback([a] {
    AgentToolRequest r;
    r.tool = "trial";
    r.manifest = read_manifest_file(a->manifest);
    r.prompts = a->prompts;
    r.prompt_ids = a->prompt_ids;
    send(r);
  });
  auto* calibrate = cmd->add_subcommand("calibrate", "Run a technique's calibration (magcache, teacache): its flags");
  calibrate->add_option("--technique", a->technique, "The technique")->required();
  calibrate->callback([a] {
    AgentToolRequest r;
    r.tool = "calibrate";
    r.technique = a->technique;
    send(r);
  });
  auto* propose = cmd->add_subcommand("propose", "Propose a manifest for the gates");
  propose->add_option("--manifest", a->manifest, "JSON file: {\"flags\": {...}} or a patch manifest")->required();
  propose->add_option("--why", a->why, "Why: what you measured (the report shows it)")->required();
  propose->callback([a] {
    AgentToolRequest r;
    r.tool = "propose";
    r.manifest = read_manifest_file(a->manifest);
    // The proposal's name: the manifest's id, else its file's name (ec10.json -> agent-cache-ec10).
    if (r.manifest.is_object() && !r.manifest.contains("id"))
      r.manifest["id"] = std::filesystem::path(a->manifest).stem().string();
    r.why = a->why;
    send(r);
  });
  add_agent_build(*cmd);
  auto* plugin =
      cmd->add_subcommand("plugin", "Hand the run a plugin built with `agent build`: its flags become valid");
  plugin->add_option("file", a->file, "The plugin (.so) in your workspace's top folder")->required();
  plugin->callback([a] {
    AgentToolRequest r;
    r.tool = "plugin";
    r.file = workspace_file_name(a->file);
    send(r);
  });
  auto* log = cmd->add_subcommand("log", "A note for the report");
  log->add_option("text", a->text, "The note")->required();
  log->callback([a] {
    AgentToolRequest r;
    r.tool = "log";
    r.text = a->text;
    send(r);
  });
}

}  // namespace autooptim::app
