#include "executors/agent_host.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/remove_tree.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/sandbox.h"
#include "base/stop_signals.h"
#include "executors/agent_channel.h"
#include "executors/agent_decoys.h"
#include "executors/agent_tools.h"
#include "executors/agent_workspace.h"
#include "executors/outbox.h"
#include "executors/trial_runner.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

using Clock = std::chrono::steady_clock;

// Where the agent sees its folders and the tools: fixed paths inside the sandbox, the real ones without it.
struct InsidePaths {
  std::string workspace, channel, replies, bin_dir;
};

// `from` itself, or, when we are root (the agent then runs as an unprivileged uid) and that uid could not reach
// it (a build under a 0700 home), a copy that uid can read and run in the agent's folders' tools/.
fs::path reachable_copy(const fs::path& from, const AgentFolders& f) {
  if (::geteuid() != 0 || reachable_by_others(from.string())) return from;
  const fs::path tools = fs::path(f.live) / "tools";
  fs::create_directories(tools);
  const fs::path copy = tools / from.filename();
  fs::copy_file(from, copy, fs::copy_options::overwrite_existing);
  fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  return copy;
}

// Without a sandbox the agent runs this binary from where it is, or from its reachable copy.
InsidePaths inside_paths(const AgentFolders& f, bool sandboxed) {
  if (sandboxed) return {"/workspace", "/channel", "/replies", "/opt/autooptim/bin"};
  const fs::path exe = reachable_copy(fs::read_symlink("/proc/self/exe"), f);
  return {f.workspace, f.requests, f.replies, exe.parent_path().string()};
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the agent's brief template");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> agent_environment(const AgentSpec& a, const InsidePaths& in) {
  std::vector<std::string> env = {"PATH=" + in.bin_dir + ":/usr/local/bin:/usr/bin:/bin",
                                  "HOME=" + in.workspace,
                                  "LANG=C.UTF-8",
                                  "TERM=dumb",
                                  "AUTOOPTIM_AGENT_CHANNEL=" + in.channel,
                                  "AUTOOPTIM_AGENT_REPLIES=" + in.replies,
                                  "AUTOOPTIM_AGENT_FAMILY=" + a.family};
  for (const auto& name : a.env_names)
    if (const char* v = std::getenv(name.c_str())) env.push_back(name + "=" + v);
  return env;
}

// The binary and the libraries it needs, each bound from its reachable copy: bwrap opens bind sources as the
// sandbox's uid.
std::vector<std::pair<std::string, std::string>> reachable_binds(std::vector<std::pair<std::string, std::string>> binds,
                                                                 const AgentFolders& f) {
  for (auto& [from, to] : binds) from = reachable_copy(from, f).string();
  return binds;
}

// The headers a plugin is compiled against (issue 42): the installed ones beside this binary, else the sources it
// was built from; "" when neither is there. Bound read-only where the binary inside looks for installed ones.
std::string plugin_headers() {
  std::error_code ec;
  const fs::path installed = fs::canonical("/proc/self/exe", ec).parent_path().parent_path() / "include" / "autooptim";
  for (const fs::path& d : {installed, fs::path(AUTOOPTIM_SOURCE_HEADERS)})
    if (fs::exists(d / "runtime" / "plugin.h", ec)) return d.string();
  return "";
}

base::SandboxSpec sandbox_spec(const AgentSpec& a, const AgentFolders& f, const InsidePaths& in, const Decoys& decoys) {
  base::SandboxSpec s;
  s.unsandboxed = a.unsandboxed && !base::sandbox_unavailable_reason().empty();
  s.workspace = f.workspace;
  s.channel = f.requests;
  if (!s.unsandboxed) {
    s.ro_binds = reachable_binds(base::self_binary_binds(in.bin_dir), f);
    s.ro_binds.push_back({f.replies, in.replies});
    if (const std::string h = plugin_headers(); !h.empty())
      s.ro_binds.push_back({h, (fs::path(in.bin_dir).parent_path() / "include" / "autooptim").string()});
    for (const auto& b : a.binds) s.ro_binds.push_back({b, b});
    // Last, so that a decoy covers its path even under a broad --agent-bind.
    for (const auto& d : decoys.binds()) s.ro_binds.push_back(d);
  }
  std::string cmd = replace_all(a.command, "{brief}", in.workspace + "/BRIEF.md");
  cmd = replace_all(replace_all(cmd, "{workspace}", in.workspace), "{family}", a.family);
  s.argv = {"/bin/sh", "-c", cmd};
  s.env = agent_environment(a, in);
  s.log_file = f.transcript;
  s.network = a.network;
  s.limits.wall_s = a.deadline_s;
  // One uid per family when we are root: the kernel counts a uid's processes across sandboxes, so agents running
  // at once must not share one (65533 for kernel, 65532 for cache, ...).
  const auto& fams = agent_families();
  s.uid_when_root = static_cast<uid_t>(65533 - (std::find(fams.begin(), fams.end(), a.family) - fams.begin()));
  return s;
}

// The sandbox, watched by a thread of its own (the main thread may be waiting on a trial): it enforces the
// limits, and kills the sandbox when the run asks this executor to stop.
class Watch {
 public:
  explicit Watch(base::Sandbox& sb) : sb_(sb), thread_([this] { loop(); }) {}
  ~Watch() {
    quit_ = true;
    thread_.join();
  }
  bool ended() const { return ended_; }

 private:
  void loop() {
    while (!quit_) {
      if (TrialRunner::stop_requested() && !stopping_) {
        stopping_ = true;
        sb_.kill("the exploration ended (its deadline or the run's stop)");
      }
      if (!sb_.poll()) {
        ended_ = true;
        while (!quit_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (sb_.running()) sb_.kill("its host is ending");
    while (sb_.poll()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  base::Sandbox& sb_;
  std::atomic<bool> quit_{false}, ended_{false};
  bool stopping_ = false;
  std::thread thread_;
};

void record_decoys(Decoys& decoys, AgentRecord& record) {
  for (const auto& path : decoys.opened())
    record.blocked("read", "opened " + path + " (a decoy stands there: the real file is not in the sandbox)");
}

// Serves the channel until the sandbox has ended.
void serve(AgentChannel& channel, AgentTools& tools, AgentRecord& record, const Watch& watch, Decoys& decoys) {
  while (!watch.ended()) {
    record_decoys(decoys, record);
    bool any = false;
    for (auto& in : channel.take()) {
      any = true;
      if (!in.request) {
        record.blocked("channel", "a request the channel refused: " + in.problem);
        channel.reply(in.name, AgentToolReply{false, in.problem, json()});
        continue;
      }
      channel.reply(in.name, tools.handle(*in.request));
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void write_summary(const ExecutorRequest& req, const base::Sandbox& sb, const AgentRecord& record, const Outbox& box,
                   double wall_s, bool sandboxed) {
  const AgentSpec& a = req.agent;
  json events = json::array();
  for (const auto& e : sb.events()) events.push_back({{"what", e.what}, {"detail", e.detail}, {"at_s", e.at_s}});
  const json j = {{"name", a.name()},
                  {"family", a.family},
                  {"command", a.command},
                  {"folder", a.agent_dir},
                  {"sandbox", sandboxed ? "bubblewrap" : "none (--agent-unsandboxed)"},
                  {"network", a.network.empty() ? json() : json(a.network)},
                  {"ended", sb.ended_how()},
                  {"events", events},
                  {"wall_s", wall_s},
                  {"trial_s", record.trial_s},
                  {"tool_call_count", record.calls()},
                  {"blocked_count", record.blocks()},
                  {"proposals", box.proposed()},
                  {"peak_processes", sb.peak_processes()},
                  {"peak_rss_bytes", sb.peak_rss_bytes()},
                  {"cpu_s", sb.cpu_s()}};
  gates::write_file_atomic((fs::path(req.outbox) / "agent.json").string(), j.dump(2) + "\n");
}

}  // namespace

int run_agent_executor(const ExecutorRequest& req) {
  const pid_t parent = getppid();
  const auto t0 = Clock::now();
  base::catch_stop_signals([](int) { TrialRunner::request_stop(); }, /*once=*/false);
  const AgentSpec& a = req.agent;
  const std::string why_not = base::sandbox_unavailable_reason();
  if (!why_not.empty() && !a.unsandboxed)
    throw Error("agent " + a.name() + ": no sandbox on this machine (" + why_not +
                "); --agent-unsandboxed runs agents without one");
  const gates::Manifest base = load_baseline(req.base_manifest);
  const std::vector<gates::Prompt> prompts = load_visible_prompts(req.prompts_file);
  Outbox box(req.outbox, base, req.family, a.proposal_prefix());
  AgentRecord record(req.outbox);
  TrialRunner run(req, base, prompts);
  const BriefFacts facts =
      brief_facts(a, base, run.on_gpu(), req.budget_trials, req.min_psnr, req.min_ssim, prompts.size());
  const AgentFolders folders =
      prepare_agent_folders(a, base, prompts, render_brief(read_text(a.brief_template), facts, a.brief_template));
  const bool sandboxed = why_not.empty();
  Decoys decoys(sandboxed ? a.decoys : std::vector<std::string>{}, folders.live + "/decoys");
  base::Sandbox sb(sandbox_spec(a, folders, inside_paths(folders, sandboxed), decoys));
  AgentChannel channel(folders.requests, folders.replies);
  AgentPlugins plugins(folders.workspace, req.outbox, a.unsandboxed);
  AgentTools tools(req, run, box, record, plugins);
  std::fprintf(stderr, "agent %s: starting %s: %s\n", a.name().c_str(), sandboxed ? "in its sandbox" : "UNSANDBOXED",
               a.command.c_str());
  sb.start();
  {
    Watch watch(sb);
    serve(channel, tools, record, watch, decoys);
  }
  record_decoys(decoys, record);
  for (const auto& e : sb.events())
    if (e.what != "exit") record.blocked(e.what, e.detail);
  finish_agent_folders(folders);
  std::error_code ec;
  runtime::remove_tree(fs::path(folders.root) / "tools", ec);
  write_summary(req, sb, record, box, std::chrono::duration<double>(Clock::now() - t0).count(), sandboxed);
  std::fprintf(stderr, "agent %s: ended (%s): %lld tool calls, %d proposals, %lld blocked\n", a.name().c_str(),
               sb.ended_how().c_str(), static_cast<long long>(record.calls()), box.proposed(),
               static_cast<long long>(record.blocks()));
  if (getppid() == parent)
    gates::write_file_atomic((fs::path(req.outbox) / "done").string(), std::to_string(box.proposed()) + "\n");
  return box.proposed();
}

}  // namespace autooptim::executors
