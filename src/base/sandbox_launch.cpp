#include "base/sandbox_launch.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace autooptim::base {
namespace {

constexpr unsigned kCloseRangeCloexec = 1U << 2;  // CLOSE_RANGE_CLOEXEC (linux/close_range.h, kernel 5.11)

struct Rlimit {
  int resource;
  rlim_t value;
};

// Only async-signal-safe calls from here on (we are the child of a fork of a threaded process).
[[noreturn]] void fail(const char* what, int code = 126) {
  const char* err = strerror(errno);  // not strictly safe, but reads a static table in glibc
  const char prefix[] = "sandbox launch: ";
  ssize_t n = write(STDERR_FILENO, prefix, sizeof prefix - 1);
  n = write(STDERR_FILENO, what, strlen(what));
  n = write(STDERR_FILENO, ": ", 2);
  n = write(STDERR_FILENO, err, strlen(err));
  n = write(STDERR_FILENO, "\n", 1);
  (void)n;
  _exit(code);
}

void reset_signals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // KILL and STOP refuse: fine
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// stdin from /dev/null, stdout and stderr to the log; every other descriptor closed at exec but `keep`.
void set_up_descriptors(const ConfinedLaunch& l, int log_fd) {
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0) fail("cannot open /dev/null");
  if (dup2(log_fd, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0) fail("cannot redirect output");
  if (syscall(SYS_close_range, 3U, ~0U, kCloseRangeCloexec) != 0) {
    struct rlimit r {};
    getrlimit(RLIMIT_NOFILE, &r);
    const int top = r.rlim_cur == RLIM_INFINITY || r.rlim_cur > 65536 ? 65536 : static_cast<int>(r.rlim_cur);
    for (int fd = 3; fd < top; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  for (const int fd : l.keep_fds)
    if (fcntl(fd, F_SETFD, 0) != 0) fail("cannot pass a descriptor on");
}

void drop_root(uid_t uid) {
  if (getuid() != 0 && geteuid() != 0) return;
  const gid_t gid = static_cast<gid_t>(uid);
  if (setgroups(0, nullptr) != 0) fail("setgroups");
  if (setresgid(gid, gid, gid) != 0) fail("setresgid");
  if (setresuid(uid, uid, uid) != 0) fail("setresuid");
}

}  // namespace

uid_t confined_uid(uid_t uid_when_root) { return getuid() == 0 ? uid_when_root : getuid(); }

std::string find_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path;
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  if (path.empty() && std::getenv("PATH")) path = std::getenv("PATH");
  size_t begin = 0;
  while (begin <= path.size()) {
    const size_t end = std::min(path.find(':', begin), path.size());
    const std::string dir = path.substr(begin, end - begin);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    begin = end + 1;
  }
  return "";
}

std::vector<std::string> unreachable_paths(uid_t uid, const std::vector<std::string>& paths) {
  if (geteuid() != 0 || uid == 0 || paths.empty()) return {};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  std::vector<const char*> c_paths;
  for (const auto& p : paths) c_paths.push_back(p.c_str());
  const pid_t pid = fork();
  if (pid == 0) {
    const gid_t gid = static_cast<gid_t>(uid);
    if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) _exit(1);
    for (size_t i = 0; i < c_paths.size(); ++i) {
      const unsigned char bad = static_cast<unsigned char>(i);
      if (access(c_paths[i], F_OK) != 0 && write(fds[1], &bad, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  std::vector<std::string> out;
  unsigned char bad = 0;
  while (pid > 0 && read(fds[0], &bad, 1) == 1)
    if (bad < paths.size()) out.push_back(paths[bad]);
  close(fds[0]);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  return out;
}

pid_t launch_confined(const ConfinedLaunch& l) {
  std::vector<std::string> args = l.argv, env = l.env;
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  std::vector<Rlimit> limits;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  bool set_cpus = false;
  if (l.apply_limits) {
    const SandboxLimits& s = l.limits;
    const int64_t as = s.address_space_bytes != 0
                           ? s.address_space_bytes
                           : std::max<int64_t>(2 * s.memory_bytes, s.memory_bytes + (int64_t{1} << 30));
    if (l.nproc > 0) limits.push_back({RLIMIT_NPROC, static_cast<rlim_t>(l.nproc)});
    if (as > 0) limits.push_back({RLIMIT_AS, static_cast<rlim_t>(as)});
    limits.push_back({RLIMIT_FSIZE, static_cast<rlim_t>(s.file_bytes)});
    limits.push_back({RLIMIT_NOFILE, static_cast<rlim_t>(s.open_files)});
    limits.push_back({RLIMIT_CORE, 0});
    cpu_set_t allowed;
    if (s.cpus > 0 && sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
      for (int c = 0, taken = 0; c < CPU_SETSIZE && taken < s.cpus; ++c)
        if (CPU_ISSET(c, &allowed)) CPU_SET(c, &cpus), ++taken;
      set_cpus = true;
    }
  }
  const uid_t uid = l.uid_when_root;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("cannot start the sandbox: fork failed: ") + strerror(errno));
  if (pid != 0) return pid;

  setpgid(0, 0);
  reset_signals();
  const int log_fd =
      l.output_fd >= 0 ? l.output_fd : open(l.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) fail("cannot open the log file");
  set_up_descriptors(l, log_fd);
  for (const Rlimit& r : limits) {
    const struct rlimit v = {r.value, r.value};
    if (setrlimit(r.resource, &v) != 0) fail("setrlimit");
  }
  if (set_cpus && sched_setaffinity(0, sizeof cpus, &cpus) != 0) fail("sched_setaffinity");
  drop_root(uid);
  // After the uid change, which clears it. bwrap --die-with-parent then takes the sandbox down with us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  if (!l.cwd.empty() && chdir(l.cwd.c_str()) != 0) fail("cannot enter the workspace");
  execve(l.program.c_str(), argv.data(), envp.data());
  fail(l.program.c_str(), 127);
}

}  // namespace autooptim::base
