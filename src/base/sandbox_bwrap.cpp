#include "base/sandbox_bwrap.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "base/sandbox_launch.h"

namespace autooptim::base {
namespace {

namespace fs = std::filesystem;

// Bound read-only when they exist: what programs need to run. /etc whole (it holds no secret a
// non-root uid could read), everything else (/home, /root, /work, /opt, /srv, /var, /run, /sys, /mnt)
// absent.
const char* const kSystemDirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"};

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

bool bound_as_system(const std::string& path) {
  for (const char* d : kSystemDirs) {
    std::error_code ec;
    const fs::path real = fs::canonical(d, ec);
    if (!ec && (under(path, d) || under(path, real.string()))) return true;
  }
  return false;
}

void add_system_dirs(std::vector<std::string>* a) {
  for (const char* d : kSystemDirs) {
    struct stat st {};
    if (lstat(d, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {  // Debian's merged /usr: /bin -> usr/bin
      char target[PATH_MAX];
      const ssize_t n = readlink(d, target, sizeof target - 1);
      if (n <= 0) continue;
      a->insert(a->end(), {"--symlink", std::string(target, static_cast<size_t>(n)), d});
    } else if (S_ISDIR(st.st_mode)) {
      a->insert(a->end(), {"--ro-bind", d, d});
    }
  }
}

// --dev makes bwrap map uid 0 first (to mount devpts) and our uid in a second, nested user namespace,
// which then holds no capability over the network namespace: the relay could not bind a port below 1024.
// With a network the few device nodes are bound one by one instead (no /dev/pts then). /dev itself is
// read-only either way (--dev's is a writable tmpfs: memory the monitor would not see); /dev/shm is a
// tmpfs of `tmpfs_size` ({"--size", N}, or {} where bwrap cannot bound it). `devices` (a GPU's nodes) are
// bound into the --dev one before it is made read-only.
void add_dev(std::vector<std::string>* a, bool network, const std::vector<std::string>& tmpfs_size,
             const std::vector<std::string>& devices) {
  if (!network) {
    a->insert(a->end(), {"--dev", "/dev"});
    for (const auto& d : devices) a->insert(a->end(), {"--dev-bind", d, d});
  } else {
    for (const char* d : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"})
      a->insert(a->end(), {"--dev-bind", d, d});
    a->insert(a->end(), {"--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
                         "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr"});
  }
  a->insert(a->end(), tmpfs_size.begin(), tmpfs_size.end());
  a->insert(a->end(), {"--tmpfs", "/dev/shm"});
  if (!network) a->insert(a->end(), {"--remount-ro", "/dev"});
}

bool bwrap_knows(const std::string& bwrap, const std::string& option) {
  static std::mutex mu;
  static std::string help;
  std::lock_guard<std::mutex> lock(mu);
  if (help.empty()) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    ConfinedLaunch l;
    l.program = bwrap;
    l.argv = {"bwrap", "--help"};
    l.output_fd = fds[1];
    l.apply_limits = false;
    const pid_t pid = launch_confined(l);
    close(fds[1]);
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) help.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
  }
  return help.find(option) != std::string::npos;
}

// Runs a trial sandbox like the real ones; "" when it worked, else why not.
std::string probe(const std::string& bwrap) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "cannot make a pipe";
  ConfinedLaunch l;
  l.program = bwrap;
  l.argv = bwrap_args(bwrap, SandboxSpec{}, -1, "", {"/bin/true"});
  l.output_fd = fds[1];
  l.apply_limits = false;
  const pid_t pid = launch_confined(l);
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return "a trial sandbox failed (" + bwrap + " exited with status " + std::to_string(status) + ": " +
         (out.empty() ? "no message" : out) + "); user namespaces may be disabled here";
}

}  // namespace

std::string find_bwrap() {
  const std::string found = find_program("bwrap", {});
  if (!found.empty()) return found;
  return access("/usr/bin/bwrap", X_OK) == 0 ? "/usr/bin/bwrap" : "";
}

std::vector<std::string> bwrap_args(const std::string& bwrap, const SandboxSpec& spec, int status_fd,
                                    const std::string& net_dir, const std::vector<std::string>& command) {
  const bool network = !net_dir.empty();
  std::vector<std::string> a = {
      "bwrap",         "--unshare-user",       "--unshare-ipc",     "--unshare-pid", "--unshare-net",
      "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname",
      "sandbox"};
  // --disable-userns needs a nested user namespace, which would again leave the relay no capability.
  if (!network && bwrap_knows(bwrap, "--disable-userns")) a.push_back("--disable-userns");
  if (network) a.insert(a.end(), {"--cap-add", "CAP_NET_BIND_SERVICE"});  // sandbox-init drops it
  if (status_fd >= 0) a.insert(a.end(), {"--json-status-fd", std::to_string(status_fd)});
  a.insert(a.end(), {"--proc", "/proc"});
  // tmpfs pages are no process's resident memory: bounded by size instead (bwrap 0.7 and later).
  std::vector<std::string> tmpfs_size;
  if (spec.limits.tmp_bytes > 0 && bwrap_knows(bwrap, "--size"))
    tmpfs_size = {"--size", std::to_string(spec.limits.tmp_bytes)};
  add_dev(&a, network, tmpfs_size, spec.devices);
  a.insert(a.end(), tmpfs_size.begin(), tmpfs_size.end());
  a.insert(a.end(), {"--tmpfs", "/tmp"});
  add_system_dirs(&a);
  if (network) {
    a.insert(a.end(), {"--ro-bind", net_dir + "/hosts", "/etc/hosts", "--ro-bind", net_dir, kInsideNetDir});
  }
  if (!spec.workspace.empty()) a.insert(a.end(), {"--bind", spec.workspace, kInsideWorkspace});
  if (!spec.channel.empty()) a.insert(a.end(), {"--bind", spec.channel, kInsideChannel});
  for (const auto& [from, to] : spec.ro_binds) a.insert(a.end(), {"--ro-bind", from, to});
  // The sandbox's own root (a tmpfs holding the mount points) read-only: nothing but the workspace, the
  // channel and /tmp can be written, not even paths that look like the run's.
  a.insert(a.end(), {"--remount-ro", "/", "--chdir", spec.workspace.empty() ? "/" : kInsideWorkspace, "--"});
  a.insert(a.end(), command.begin(), command.end());
  return a;
}

std::string sandbox_unavailable_reason() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] {
    // A machine without user namespaces, as the tests of --agent-unsandboxed and of the refusal need one.
    if (const char* off = std::getenv("AUTOOPTIM_NO_SANDBOX"); off && *off && std::string(off) != "0") {
      reason = "AUTOOPTIM_NO_SANDBOX is set";
      return;
    }
    const std::string bwrap = find_bwrap();
    reason = bwrap.empty() ? "bwrap (bubblewrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
                           : probe(bwrap);
  });
  return reason;
}

std::vector<std::pair<std::string, std::string>> self_binary_binds(const std::string& inside_bin_dir) {
  return binary_binds("/proc/self/exe", inside_bin_dir);
}

std::vector<std::pair<std::string, std::string>> binary_binds(const std::string& binary,
                                                              const std::string& inside_bin_dir) {
  std::vector<std::pair<std::string, std::string>> binds;
  std::error_code ec;
  const fs::path exe = fs::canonical(binary, ec);
  if (ec) return binds;
  binds.emplace_back(exe.string(), inside_bin_dir + "/" + exe.filename().string());
  // Modules the binary loads later from its own folder (dlopen next to the executable).
  for (const auto& e : fs::directory_iterator(exe.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && name.find(".so") != std::string::npos)
      binds.emplace_back(e.path().string(), inside_bin_dir + "/" + name);
  }
  std::set<std::string> seen;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find(" (deleted)") != std::string::npos || path == exe.string() || !seen.insert(path).second) continue;
    if (path.find(".so") == std::string::npos || bound_as_system(path) || !fs::is_regular_file(path, ec)) continue;
    binds.emplace_back(path, path);
  }
  return binds;
}

}  // namespace autooptim::base
