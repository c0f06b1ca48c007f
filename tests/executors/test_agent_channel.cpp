// The agent channel's strictness (executors/agent_channel.h), the brief's placeholders and the agent options:
// what a sandboxed agent can put in front of its host is only a small request of known keys.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "executors/agent_channel.h"
#include "executors/agent_plugins.h"
#include "gates/agent_names.h"
#include "executors/agent_spec.h"
#include "executors/agent_workspace.h"

namespace fs = std::filesystem;
using autooptim::Error;
using namespace autooptim::executors;
using nlohmann::json;

namespace {

json valid_request() {
  return {{"tool", "trial"}, {"manifest", {{"flags", json::object()}}},
          {"prompts", 2},    {"prompt_ids", json::array()},
          {"why", ""},       {"text", ""},
          {"technique", ""}, {"file", ""}};
}

std::string error_of(const json& j) {
  try {
    AgentToolRequest::from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "agent-channel-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(AgentChannel, ARequestRoundTripsAndEveryKeyIsChecked) {
  const AgentToolRequest r = AgentToolRequest::from_json(valid_request());
  EXPECT_EQ(r.tool, "trial");
  EXPECT_EQ(r.prompts, 2);
  EXPECT_EQ(r.to_json(), valid_request());

  json j = valid_request();
  j["shell"] = "rm -rf /";
  EXPECT_NE(error_of(j).find("unknown key 'shell'"), std::string::npos) << error_of(j);
  j = valid_request();
  j["tool"] = "gate";
  EXPECT_NE(error_of(j).find("unknown tool 'gate'"), std::string::npos) << error_of(j);
  j = valid_request();
  j.erase("why");
  EXPECT_NE(error_of(j).find("missing key 'why'"), std::string::npos) << error_of(j);
  j = valid_request();
  j["prompts"] = "3";
  EXPECT_NE(error_of(j).find("'prompts'"), std::string::npos) << error_of(j);
  j = valid_request();
  j["prompt_ids"] = json::array({1});
  EXPECT_NE(error_of(j).find("'prompt_ids'"), std::string::npos) << error_of(j);
  j = valid_request();
  j["manifest"] = "manifests/wan22-tiny/baseline.json";  // a path on the host: never read
  EXPECT_NE(error_of(j).find("'manifest'"), std::string::npos) << error_of(j);
  j = valid_request();
  j["text"] = std::string(5000, 'x');
  EXPECT_NE(error_of(j).find("longer than"), std::string::npos) << error_of(j);
  j = valid_request();
  j["file"] = std::string(300, 'x');
  EXPECT_NE(error_of(j).find("'file': longer than 255"), std::string::npos) << error_of(j);
  j = valid_request();
  j.erase("file");
  EXPECT_NE(error_of(j).find("missing key 'file'"), std::string::npos) << error_of(j);
}

// A plugin is taken only as a plain regular file of the workspace's top folder: a path, a hidden name, a link
// (to a file outside, to the run's ledger) and a folder are breaches (refused before anything is read or copied),
// a missing file a mistake; none leaves a copy in the outbox.
TEST(AgentPlugins, OnlyARegularFileOfTheWorkspaceIsTaken) {
  TempDir d;
  const fs::path ws = d.path / "workspace", outbox = d.path / "outbox";
  fs::create_directories(ws);
  std::ofstream(d.path / "ledger.jsonl") << "{}\n";
  fs::create_symlink(d.path / "ledger.jsonl", ws / "link.so");
  fs::create_directories(ws / "dir.so");
  AgentPlugins plugins(ws.string(), outbox.string(), false);
  auto breach = [&](const std::string& name) {
    try {
      plugins.take(name);
    } catch (const PluginBreach& e) {
      return std::string(e.what());
    } catch (const Error& e) {
      return "not a breach: " + std::string(e.what());
    }
    return std::string("taken");
  };
  EXPECT_NE(breach("../ledger.jsonl").find("not a file name of your workspace's top folder"), std::string::npos);
  EXPECT_NE(breach("sub/x.so").find("not a file name"), std::string::npos);
  EXPECT_NE(breach(".hidden.so").find("not a file name"), std::string::npos);
  EXPECT_NE(breach("").find("not a file name"), std::string::npos);
  EXPECT_EQ(breach("link.so"), "plugin: link.so: a link (the run takes no link as a plugin)");
  EXPECT_EQ(breach("dir.so"), "plugin: dir.so: not a regular file");
  EXPECT_EQ(breach("missing.so"), "not a breach: plugin: missing.so: no such regular file in your workspace");
  EXPECT_TRUE(fs::is_empty(autooptim::gates::agent_plugins_dir(outbox.string())));
  EXPECT_EQ(std::string(plugins.ref("").file), "");
  EXPECT_THROW(plugins.ref(std::string(64, 'a')), Error);  // never handed over
}

TEST(AgentChannel, TheHostReadsOnlySmallRegularRequestFiles) {
  TempDir d;
  AgentChannel ch((d.path / "requests").string(), (d.path / "replies").string());
  const fs::path req = d.path / "requests";
  std::ofstream(req / "0001-1-0.json") << valid_request().dump();
  std::ofstream(d.path / "secret.txt") << "held-out words";
  fs::create_symlink(d.path / "secret.txt", req / "0002-1-0.json");                     // a link to a host file
  std::ofstream(req / "0003-1-0.json") << std::string(kMaxAgentRequestBytes + 1, ' ');  // too large
  std::ofstream(req / "0004-1-0.json") << "{\"tool\": \"trial\"";                       // torn
  std::ofstream(req / "../x.json");                                                     // outside: never listed
  std::ofstream(req / "notes.txt") << "hello";                                          // not a request name
  std::ofstream(req / ".0005-1-0.json.tmp.1") << "{}";                                  // a tool's temporary file
  const auto in = ch.take();
  ASSERT_EQ(in.size(), 5u);
  EXPECT_TRUE(in[0].request.has_value());
  EXPECT_FALSE(in[1].request.has_value());
  EXPECT_NE(in[1].problem.find("not a regular file"), std::string::npos) << in[1].problem;
  EXPECT_EQ(in[1].problem.find("held-out"), std::string::npos);
  EXPECT_NE(in[2].problem.find("larger than"), std::string::npos) << in[2].problem;
  EXPECT_NE(in[3].problem.find("not valid JSON"), std::string::npos) << in[3].problem;
  EXPECT_TRUE(in[4].name.empty());  // not answered: it is not a request
  EXPECT_NE(in[4].problem.find("not a request"), std::string::npos) << in[4].problem;
  EXPECT_TRUE(fs::exists(d.path / "secret.txt"));  // the link's target untouched
  EXPECT_TRUE(fs::exists(req / ".0005-1-0.json.tmp.1"));
  EXPECT_FALSE(fs::exists(req / "0001-1-0.json"));

  ch.reply(in[0].name, AgentToolReply{true, "", json{{"speedup", 1.5}}});
  std::ifstream reply(d.path / "replies" / in[0].name);
  const json r = json::parse(reply);
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["result"]["speedup"], 1.5);
}

TEST(AgentChannel, TheBriefsPlaceholdersMustAllBeKnown) {
  BriefFacts f;
  f.values = {{"model", "wan22-tiny"}, {"family", "cache"}};
  EXPECT_EQ(render_brief("# {{family}} of {{model}}: {{family}}", f, "t"), "# cache of wan22-tiny: cache");
  EXPECT_THROW(render_brief("{{budget}}", f, "t"), Error);
  EXPECT_THROW(render_brief("{{model", f, "t"), Error);
}

TEST(AgentChannel, AgentArgumentsNameTheirProblem) {
  const AgentSpec s = parse_agent_arg("vae=claude -p \"$(cat {brief})\"");
  EXPECT_EQ(s.family, "vae");
  EXPECT_EQ(s.command, "claude -p \"$(cat {brief})\"");
  EXPECT_EQ(s.name(), "agent-vae");
  EXPECT_EQ(s.manifest_family(), "kernel");
  EXPECT_EQ(s.proposal_prefix(), "agent-vae-");
  EXPECT_THROW(parse_agent_arg("cache"), Error);
  EXPECT_THROW(parse_agent_arg("gates=sh x"), Error);
  EXPECT_THROW(parse_agent_arg("cache=  "), Error);
}

TEST(AgentChannel, StagingIsNeededOnlyWhereOthersCannotReach) {
  TempDir d;
  fs::create_directories(d.path / "open" / "agents");
  ::chmod(d.path.c_str(), 0711);
  EXPECT_TRUE(reachable_by_others((d.path / "open" / "agents").string()));
  ::chmod(d.path.c_str(), 0700);
  EXPECT_FALSE(reachable_by_others((d.path / "open" / "agents").string()));
}
