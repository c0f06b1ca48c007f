#include "base/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "base/error.h"

extern char** environ;

namespace autooptim::runtime {

std::vector<std::string> environment_with(const std::vector<std::string>& drop, const std::vector<std::string>& add) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    bool keep = true;
    for (const auto& d : drop)
      if (std::strncmp(*e, d.c_str(), d.size()) == 0 && (*e)[d.size()] == '=') keep = false;
    if (keep) out.push_back(*e);
  }
  out.insert(out.end(), add.begin(), add.end());
  return out;
}

pid_t spawn_self(const SelfSpawn& s) {
  std::vector<std::string> env = s.env, args = s.args;
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (s.truncate_log ? O_TRUNC : O_APPEND);
  const pid_t parent = getpid();

  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &old);
  const pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    throw Error("cannot start " + s.what + " process: fork failed");
  }
  if (pid == 0) {
    // The parent's handlers are reset by exec; the mask (SIGINT/SIGTERM blocked) is kept.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the parent died before prctl
    const int fd = ::open(s.log_file.c_str(), flags, 0644);
    if (fd >= 0) {
      ssize_t n = ::write(fd, s.header.data(), s.header.size());
      (void)n;
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    execve("/proc/self/exe", argv.data(), envp.data());
    const char msg[] = "execve of /proc/self/exe failed\n";
    ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
  return pid;
}

std::string last_log_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

}  // namespace autooptim::runtime
