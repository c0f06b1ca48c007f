// autooptim agent build SRC... --out PLUGIN.so: compiles a technique plugin (src/runtime/plugin.h) as the
// runtime was compiled (the compiler, include directories, definitions and C++ flags recorded by the build,
// plugin_toolchain.inc), against the installed headers (<prefix>/include/autooptim) or, in a build tree, the
// sources. It runs where the agent runs (inside its sandbox); the compiler's messages are its output.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/strings.h"
#include "commands.h"

namespace autooptim::app {
namespace {

namespace fs = std::filesystem;

struct Toolchain {
  std::string compiler, includes, definitions, flags, source_headers;
};
const Toolchain kToolchain{
#include "plugin_toolchain.inc"
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// The headers a plugin is compiled against: the installed ones beside the binary, else the build's sources.
std::string header_root() {
  std::error_code ec;
  const fs::path installed =
      fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "include" / "autooptim";
  if (fs::exists(installed / "runtime" / "plugin.h", ec)) return installed.string();
  if (fs::exists(fs::path(kToolchain.source_headers) / "runtime" / "plugin.h", ec)) return kToolchain.source_headers;
  throw Error("agent build: the plugin headers are not installed (" + installed.string() +
              ") and the sources this binary was built from are gone (" + kToolchain.source_headers + ")");
}

std::vector<std::string> compile_command(const std::vector<std::string>& sources, const std::string& out) {
  std::vector<std::string> cmd = {kToolchain.compiler, "-std=c++17", "-O2", "-fPIC", "-shared", "-w"};
  for (const auto& f : split(kToolchain.flags, ' ')) cmd.push_back(f);
  cmd.push_back("-I" + header_root());
  // The compiler's own directories stay its own: -isystem /usr/include would break #include_next.
  std::set<std::string> seen = {kToolchain.source_headers};
  for (const auto& d : split(kToolchain.includes, ';')) {
    const std::string dir = fs::weakly_canonical(d).string();
    if (dir != "/usr/include" && dir != "/usr/local/include" && seen.insert(dir).second)
      cmd.push_back("-isystem" + dir);
  }
  for (const auto& d : split(kToolchain.definitions, ';')) cmd.push_back("-D" + d);
  cmd.insert(cmd.end(), sources.begin(), sources.end());
  cmd.push_back("-o");
  cmd.push_back(out);
  return cmd;
}

int run(const std::vector<std::string>& cmd) {
  const pid_t pid = fork();
  if (pid < 0) throw Error("agent build: cannot start the compiler");
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "agent build: cannot run %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error("agent build: lost the compiler process");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct BuildArgs {
  std::vector<std::string> sources;
  std::string out;
};

void build_plugin(const BuildArgs& a) {
  std::error_code ec;
  for (const auto& s : a.sources)
    if (!fs::is_regular_file(s, ec)) throw Error("agent build: no such source file: " + s);
  const std::string tmp = a.out + ".tmp" + std::to_string(getpid());
  if (const int rc = run(compile_command(a.sources, tmp)); rc != 0) {
    fs::remove(tmp, ec);
    throw Error("agent build: the compiler failed (exit " + std::to_string(rc) + "); its messages are above");
  }
  fs::rename(tmp, a.out);  // a plugin file is whole or absent
  std::printf("%s\n", a.out.c_str());
}

}  // namespace

void add_agent_build(CLI::App& agent) {
  auto a = std::make_shared<BuildArgs>();
  auto* cmd = agent.add_subcommand("build", "Compile a technique plugin (one C++ source) as this binary was built");
  cmd->add_option("sources", a->sources, "The plugin's source file(s)")->required();
  cmd->add_option("--out", a->out, "The shared object to write")->required();
  cmd->callback([a] { build_plugin(*a); });
}

}  // namespace autooptim::app
