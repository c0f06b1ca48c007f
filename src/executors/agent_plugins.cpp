#include "executors/agent_plugins.h"

#include <fcntl.h>
#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/sha256.h"
#include "gates/agent_names.h"
#include "gates/sandboxed_worker.h"
#include "runtime/techniques/registry.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

// A file name of the workspace's top folder: no path, no hidden file.
void check_plain_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.' || name.find('/') != std::string::npos)
    throw PluginBreach("plugin: '" + name.substr(0, 80) + "' is not a file name of your workspace's top folder");
}

// Copies the regular file `name` of folder `from` to `to`, never following a link; Error naming the problem.
void copy_without_links(const std::string& from, const std::string& name, const std::string& to) {
  const int dir = ::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) throw Error("plugin: the workspace cannot be opened");
  const int fd = ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  ::close(dir);
  if (fd < 0 && errno == ELOOP) throw PluginBreach("plugin: " + name + ": a link (the run takes no link as a plugin)");
  if (fd < 0) throw Error("plugin: " + name + ": no such regular file in your workspace");
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw PluginBreach("plugin: " + name + ": not a regular file");
  }
  if (st.st_size > kMaxPluginBytes) problem = "larger than " + std::to_string(kMaxPluginBytes >> 20) + " MiB";
  const int out = problem.empty() ? ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
  if (problem.empty() && out < 0) problem = "cannot write its copy " + to;
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  for (ssize_t n; problem.empty() && (n = ::read(fd, buf.data(), buf.size())) != 0;) {
    if (n < 0 || ::write(out, buf.data(), static_cast<size_t>(n)) != n) problem = "could not be copied whole";
    total += n > 0 ? n : 0;
    if (total > kMaxPluginBytes) problem = "larger than " + std::to_string(kMaxPluginBytes >> 20) + " MiB";
  }
  ::close(fd);
  if (out >= 0) ::close(out);
  if (!problem.empty()) {
    std::error_code ec;
    fs::remove(to, ec);
    throw Error("plugin: " + name + ": " + problem);
  }
}

}  // namespace

AgentPlugins::AgentPlugins(std::string workspace, const std::string& outbox, bool without_sandbox)
    : workspace_(std::move(workspace)), outbox_(outbox), without_sandbox_(without_sandbox) {}

json AgentPlugins::take(const std::string& name) {
  check_plain_name(name);
  if (static_cast<int>(files_.size()) >= kMaxAgentPlugins)
    throw Error("plugin: at most " + std::to_string(kMaxAgentPlugins) + " plugins per agent");
  const std::string dir = gates::agent_plugins_dir(outbox_);
  fs::create_directories(dir);
  const std::string incoming = dir + "/.incoming.so";
  copy_without_links(workspace_, name, incoming);
  const std::string sha = gates::sha256_file_hex(incoming);
  const std::string kept = gates::agent_plugin_file(outbox_, sha);
  fs::rename(incoming, kept);
  try {
    gates::ensure_plugin_described(kept, without_sandbox_);  // Error: not a plugin, or one the registry refuses
  } catch (const Error& e) {
    std::error_code ec;
    if (!files_.count(sha)) fs::remove(kept, ec);
    throw Error("plugin: " + name + ": " + e.what());
  }
  files_[sha] = kept;
  json techniques = json::array();
  for (const auto& t : runtime::techniques::all())
    if (t.plugin == sha) techniques.push_back(t.name);
  return {{"plugin", sha},
          {"file", name},
          {"techniques", techniques},
          {"note", "its flags are valid in your manifests now; `autooptim agent techniques` lists them in full"}};
}

workers::PluginRef AgentPlugins::ref(const std::string& sha256) const {
  if (sha256.empty()) return {};
  const auto it = files_.find(sha256);
  if (it == files_.end()) throw Error("plugin " + sha256 + " was not handed over (autooptim agent plugin FILE.so)");
  return {it->second, without_sandbox_};
}

}  // namespace autooptim::executors
