#include "base/sandbox.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/remove_tree.h"
#include "base/error.h"
#include "base/sandbox_bwrap.h"
#include "base/sandbox_launch.h"
#include "base/sandbox_monitor.h"
#include "base/sandbox_relay.h"
#include "base/spawn.h"

namespace autooptim::base {
namespace {

namespace fs = std::filesystem;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The sandbox's uid must own what it works in (we are root, it is not).
void chown_tree(const std::string& dir, uid_t uid) {
  const gid_t gid = static_cast<gid_t>(uid);
  if (lchown(dir.c_str(), uid, gid) != 0) throw Error("cannot hand " + dir + " to the sandbox: " + strerror(errno));
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (lchown(it->path().c_str(), uid, gid) != 0)
      throw Error("cannot hand " + it->path().string() + " to the sandbox: " + strerror(errno));
}

bool is_numeric_address(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

int listen_unix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof addr.sun_path) throw Error("cannot make the network relay's socket " + path);
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0 ||
      chmod(path.c_str(), 0666) != 0) {
    close(fd);
    throw Error("cannot make the network relay's socket " + path + ": " + strerror(errno));
  }
  return fd;
}

void signal_pidfd(int pidfd, int sig) {
  if (pidfd >= 0) syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0);
}

int waitpid_retrying(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

Sandbox::Sandbox(SandboxSpec spec) : spec_(std::move(spec)) {}

Sandbox::~Sandbox() {
  if (running()) kill("the sandbox's owner ended it");
  relay_.reset();
  if (status_fd_ >= 0) close(status_fd_);
  if (init_pidfd_ >= 0) close(init_pidfd_);
  std::error_code ec;
  if (!net_dir_.empty()) runtime::remove_tree(net_dir_, ec);
}

void Sandbox::check_spec() const {
  if (spec_.argv.empty()) throw Error("the sandbox has no command to run");
  if (spec_.log_file.empty()) throw Error("the sandbox has no log file");
  if (!fs::is_directory(spec_.workspace)) throw Error("sandbox workspace " + spec_.workspace + " is not a folder");
  if (!spec_.channel.empty() && !fs::is_directory(spec_.channel))
    throw Error("sandbox channel " + spec_.channel + " is not a folder");
  for (const auto& [from, to] : spec_.ro_binds) {
    std::error_code ec;
    if (!fs::exists(from, ec)) throw Error("sandbox bind source " + from + " (for " + to + ") does not exist");
    if (to.empty() || to[0] != '/') throw Error("sandbox bind target '" + to + "' is not an absolute path");
  }
  for (const auto& d : spec_.devices) {
    std::error_code ec;
    if (!fs::is_character_file(d, ec)) throw Error("sandbox device " + d + " is not a device node");
  }
  if (!spec_.devices.empty() && !spec_.network.empty())
    throw Error("a sandbox with a network endpoint cannot be given devices");
}

// bwrap runs as the sandbox's uid: a bind source under a folder it may not search (a 0700 home) would
// fail inside bwrap, after the sandbox has started, with the command's exit status as the only trace.
void Sandbox::check_reachable(uid_t uid) const {
  std::vector<std::string> sources = {spec_.workspace};
  if (!spec_.channel.empty()) sources.push_back(spec_.channel);
  for (const auto& b : spec_.ro_binds) sources.push_back(b.first);
  if (sources.size() > 255) return;  // reported by index in a byte; bwrap reports the rest
  const std::vector<std::string> bad = unreachable_paths(uid, sources);
  if (!bad.empty())
    throw Error("the sandbox runs as uid " + std::to_string(uid) + ", which cannot reach " + bad.front() +
                " (a folder above it is not searchable by others)");
}

void Sandbox::start() {
  if (pid_ > 0) throw Error("the sandbox was started already");
  check_spec();
  const uid_t uid = confined_uid(spec_.uid_when_root);
  if (geteuid() == 0 && uid != 0) {
    chown_tree(spec_.workspace, uid);
    if (!spec_.channel.empty()) chown_tree(spec_.channel, uid);
    check_reachable(uid);
  }
  ConfinedLaunch l;
  l.env = spec_.env;  // bwrap passes its environment on unchanged: no values on its command line
  l.log_file = spec_.log_file;
  l.limits = spec_.limits;
  l.uid_when_root = spec_.uid_when_root;
  // The kernel counts every process of the uid (outside the sandbox too) against RLIMIT_NPROC; the
  // monitor enforces the exact cap, the rlimit bounds a fork bomb between two polls.
  l.nproc = spec_.limits.processes + processes_of_uid(uid) + 8;
  start_s_ = now_s();
  if (spec_.unsandboxed) {
    l.program = find_program(spec_.argv[0], spec_.env);
    if (l.program.empty()) throw Error("cannot run " + spec_.argv[0] + ": not found on the PATH");
    l.argv = spec_.argv;
    l.cwd = spec_.workspace;
    pid_ = launch_confined(l);
    monitor_ = std::make_unique<SandboxMonitor>(SandboxMonitor::of_group(pid_));
    return;
  }
  if (const std::string why = sandbox_unavailable_reason(); !why.empty())
    throw Error("cannot start the sandbox: " + why);
  std::vector<std::string> command = spec_.argv;
  if (!spec_.network.empty()) {
    prepare_network();
    std::string host;
    int port = 0;
    parse_endpoint(spec_.network, &host, &port);
    command = {spec_.relay_binary,
               "sandbox-init",
               "--listen",
               std::to_string(port),
               "--socket",
               std::string(kInsideNetDir) + "/" + kNetSocketName,
               "--"};
    command.insert(command.end(), spec_.argv.begin(), spec_.argv.end());
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error("cannot start the sandbox: pipe failed");
  l.program = find_bwrap();
  l.argv = bwrap_args(l.program, spec_, fds[1], net_dir_, command);
  l.keep_fds = {fds[1]};
  try {
    pid_ = launch_confined(l);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[1]);
  status_fd_ = fds[0];
  await_sandbox_init();
  monitor_ = std::make_unique<SandboxMonitor>(SandboxMonitor::of_namespace(init_pid_));
}

void Sandbox::prepare_network() {
  std::string host;
  int port = 0;
  parse_endpoint(spec_.network, &host, &port);
  char dir[] = "/tmp/autooptim-net-XXXXXX";
  if (!mkdtemp(dir)) throw Error(std::string("cannot make the network relay's folder: ") + strerror(errno));
  net_dir_ = dir;
  chmod(dir, 0755);  // the sandbox's uid reaches the socket through it
  std::ofstream hosts(net_dir_ + "/hosts");
  hosts << "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  if (!is_numeric_address(host) && host != "localhost") hosts << "127.0.0.1\t" << host << "\n";
  hosts.close();
  if (!hosts) throw Error("cannot write the sandbox's hosts file in " + net_dir_);
  const int fd = listen_unix(net_dir_ + "/" + kNetSocketName);
  relay_ = std::make_unique<HostRelay>(fd, host, port);
}

// bwrap's first status document names the sandbox's init ({"child-pid": N, ...}); when bwrap cannot
// set the sandbox up it exits instead, its message in the log.
void Sandbox::await_sandbox_init() {
  std::string text;
  const double deadline = now_s() + 30;
  while (text.find('}') == std::string::npos && now_s() < deadline) {
    pollfd p = {status_fd_, POLLIN, 0};
    if (::poll(&p, 1, 250) <= 0) continue;
    char buf[1024];
    const ssize_t n = read(status_fd_, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  const size_t key = text.find("\"child-pid\"");
  if (key != std::string::npos) init_pid_ = static_cast<pid_t>(std::atol(text.c_str() + text.find(':', key) + 1));
  if (init_pid_ > 0) {
    init_pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, init_pid_, 0));
    fcntl(status_fd_, F_SETFL, O_NONBLOCK);
    return;
  }
  ::kill(-pid_, SIGKILL);
  finish(waitpid_retrying(pid_));
  std::string why = runtime::last_log_line(spec_.log_file);
  if (getuid() == 0)
    why += " (the sandbox runs as uid " + std::to_string(spec_.uid_when_root) +
           ": every bind source and the folders above it must be readable by it)";
  throw Error("cannot start the sandbox: " + (why.empty() ? "bwrap " + ended_how() : why));
}

void Sandbox::record(const std::string& what, const std::string& detail) {
  events_.push_back({what, detail, elapsed_s()});
}

double Sandbox::elapsed_s() const { return pid_ > 0 ? now_s() - start_s_ : 0; }

void Sandbox::take_relay_events() {
  if (!relay_) return;
  for (const auto& f : relay_->take_failures()) record("network", f);
}

bool Sandbox::poll() {
  if (pid_ < 0 || ended_) return false;
  take_relay_events();
  siginfo_t info{};
  // WNOWAIT: the process group stays ours (its id cannot be reused) until the leftovers are killed.
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
    if (spec_.unsandboxed) {
      kill_unsandboxed();
    } else {
      signal_pidfd(init_pidfd_, SIGKILL);
    }
    finish(waitpid_retrying(pid_));
    return false;
  }
  return !check_limits();
}

bool Sandbox::check_limits() {
  const ProcessSample s = monitor_->sample();
  const SandboxLimits& lim = spec_.limits;
  const auto mib = [](int64_t b) { return std::to_string(b >> 20) + " MiB"; };
  const auto n = static_cast<int64_t>(s.pids.size());
  if (n >= lim.processes) {
    record("process limit", std::to_string(n) + " processes (limit " + std::to_string(lim.processes) + ")");
    kill("process limit");
  } else if (s.rss_bytes > lim.memory_bytes) {
    record("memory limit", mib(s.rss_bytes) + " resident (limit " + mib(lim.memory_bytes) + ")");
    kill("memory limit");
  } else if (lim.wall_s > 0 && elapsed_s() > lim.wall_s) {
    record("wall time", std::to_string(static_cast<int64_t>(elapsed_s())) + " s (limit " +
                            std::to_string(static_cast<int64_t>(lim.wall_s)) + " s)");
    kill("wall time");
  }
  return ended_;
}

void Sandbox::kill(const std::string& why) {
  if (pid_ < 0 || ended_) return;
  record("killed", why);
  killed_why_ = why;
  if (spec_.unsandboxed) {
    kill_unsandboxed();
    finish(waitpid_retrying(pid_));
    return;
  }
  ::kill(-pid_, SIGKILL);  // bwrap; --die-with-parent takes its init down too
  signal_pidfd(init_pidfd_, SIGKILL);
  finish(waitpid_retrying(pid_));
}

// The process group and the members that left it (setsid: found while their parents live), until none is
// alive: a killed process lingers a moment, and a fork may race the kill. Before the leader is reaped, so
// that its pid (the group's id) cannot be reused meanwhile.
void Sandbox::kill_unsandboxed() {
  for (int i = 0; i < 500; ++i) {
    const std::vector<pid_t> left = monitor_->sample().pids;
    ::kill(-pid_, SIGKILL);
    if (left.empty()) return;
    for (const pid_t p : left) ::kill(p, SIGKILL);
    usleep(10000);
  }
}

// The init's exit waits for every process of its namespace to die: once its pidfd reads, nothing is left.
void Sandbox::finish(int status) {
  if (init_pidfd_ >= 0) {
    signal_pidfd(init_pidfd_, SIGKILL);
    pollfd p = {init_pidfd_, POLLIN, 0};
    ::poll(&p, 1, 5000);
  }
  ended_ = true;
  status_ = status;
  take_relay_events();
  // bwrap names the sandbox's init before it sets the sandbox up: a setup failure (a bind source bwrap
  // cannot open) only shows as an early exit, with bwrap's message last in the transcript.
  if (!spec_.unsandboxed && killed_why_.empty() && status != 0 && elapsed_s() < 5) {
    const std::string last = runtime::last_log_line(spec_.log_file);
    if (last.rfind("bwrap: ", 0) == 0) record("sandbox", last);
  }
  record("exit", ended_how());
}

bool Sandbox::running() const { return pid_ > 0 && !ended_; }
int Sandbox::exit_status() const { return status_; }
const std::vector<SandboxEvent>& Sandbox::events() const { return events_; }
int64_t Sandbox::peak_processes() const { return monitor_ ? monitor_->peak_processes() : 0; }
int64_t Sandbox::peak_rss_bytes() const { return monitor_ ? monitor_->peak_rss_bytes() : 0; }
double Sandbox::cpu_s() const { return monitor_ ? monitor_->cpu_s() : 0; }
int64_t Sandbox::network_connections() const { return relay_ ? relay_->connections() : 0; }

std::string Sandbox::ended_how() const {
  std::string how = WIFEXITED(status_)     ? "exit " + std::to_string(WEXITSTATUS(status_))
                    : WIFSIGNALED(status_) ? "signal " + std::to_string(WTERMSIG(status_))
                                           : "status " + std::to_string(status_);
  if (!killed_why_.empty()) how += " (killed: " + killed_why_ + ")";
  return how;
}

}  // namespace autooptim::base
