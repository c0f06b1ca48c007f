// The agent sandbox (base/sandbox.h) with the real bwrap and real processes: every test here fails when
// the isolation or a limit it checks is broken. Skipped where bwrap or user namespaces do not work.
#include <arpa/inet.h>
#include <netdb.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/sandbox.h"
#include "base/sandbox_relay.h"

namespace fs = std::filesystem;
using autooptim::base::Sandbox;
using autooptim::base::SandboxSpec;

namespace {

// Skips where the machine cannot sandbox; AUTOOPTIM_REQUIRE_SANDBOX=1 (a CI machine that must) fails instead.
#define SKIP_WITHOUT_SANDBOX()                                                 \
  do {                                                                         \
    const std::string why = autooptim::base::sandbox_unavailable_reason();     \
    const char* require = std::getenv("AUTOOPTIM_REQUIRE_SANDBOX");            \
    if (!why.empty() && require && std::string(require) == "1") FAIL() << why; \
    if (!why.empty()) GTEST_SKIP() << "no sandbox on this machine: " << why;   \
  } while (0)

// A folder of the test's own under /tmp, readable by the sandbox's uid (which is not ours when root).
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/sandbox-test-XXXXXX";
    path = mkdtemp(tmpl);
    chmod(path.c_str(), 0755);
    fs::create_directories(path / "ws");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

SandboxSpec shell_spec(const TempDir& dir, const std::string& script) {
  SandboxSpec spec;
  spec.workspace = dir / "ws";
  spec.log_file = dir / "log.txt";
  spec.env = {"PATH=/usr/bin:/bin", "HOME=/workspace", "LANG=C"};
  spec.argv = {"/bin/bash", "-c", script};
  return spec;
}

// Polls until the sandbox ends (or kills it after `limit_s`); returns the seconds it ran.
double run_to_end(Sandbox* sb, double limit_s = 30) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto secs = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  while (sb->poll()) {
    if (secs() > limit_s) sb->kill("test time limit");
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return secs();
}

bool has_event(const Sandbox& sb, const std::string& what) {
  return std::any_of(sb.events().begin(), sb.events().end(), [&](const auto& e) { return e.what == what; });
}

// Live processes whose command line holds `marker` (zombies have none).
int processes_with(const std::string& marker) {
  int n = 0;
  DIR* d = opendir("/proc");
  while (const dirent* e = d ? readdir(d) : nullptr) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string cmd = read_text(std::string("/proc/") + e->d_name + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(marker) != std::string::npos) ++n;
  }
  if (d) closedir(d);
  return n;
}

std::string unique(const std::string& stem) { return stem + std::to_string(getpid()) + "x" + std::to_string(rand()); }

// A sleep of about 300 s whose argument no other process has: `sleep N` is then found by its command line.
std::string unique_sleep() { return "sleep 3" + std::to_string(rand() % 100) + "." + std::to_string(getpid()) + "1"; }

// A TCP listener on 127.0.0.1 that greets every connection; counts them.
struct Listener {
  int fd = -1, port = 0;
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  std::thread thread;
  explicit Listener(int want_port = 0, bool any_address = false) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(want_port));
    a.sin_addr.s_addr = htonl(any_address ? INADDR_ANY : INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 16) != 0) {
      close(fd);
      fd = -1;
      return;
    }
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread = std::thread([this] {
      while (!stop) {
        timeval tv{0, 100000};
        fd_set set;
        FD_ZERO(&set);
        FD_SET(fd, &set);
        if (select(fd + 1, &set, nullptr, nullptr, &tv) <= 0) continue;
        const int c = accept(fd, nullptr, nullptr);
        if (c < 0) continue;
        ++accepted;
        const char hello[] = "hello-from-host\n";
        ssize_t n = write(c, hello, sizeof hello - 1);
        (void)n;
        close(c);
      }
    });
  }
  ~Listener() {
    stop = true;
    if (thread.joinable()) thread.join();
    if (fd >= 0) close(fd);
  }
};

// A port on 127.0.0.1 that nothing listens on.
int closed_port() {
  Listener l;
  return l.port;  // closed again when `l` goes
}

TEST(Sandbox, WritesItsWorkspaceSeenOutside) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  Sandbox sb(shell_spec(dir, "echo hello > out.txt && pwd > where.txt && echo $HOME > home.txt"));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(sb.ended_how(), "exit 0") << read_text(dir / "log.txt");
  EXPECT_EQ(read_text(dir / "ws/out.txt"), "hello\n");
  EXPECT_EQ(read_text(dir / "ws/where.txt"), "/workspace\n");
  EXPECT_TRUE(has_event(sb, "exit"));
}

TEST(Sandbox, FilesOutsideTheBindsAreInvisible) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const std::string name = unique("SECRETNAME");
  fs::create_directories(dir.path / "secret");
  std::ofstream(dir / ("secret/" + name)) << "top secret\n";
  chmod((dir / ("secret/" + name)).c_str(), 0644);
  const std::string script = "cat " + dir / ("secret/" + name) + " > cat.txt 2>&1; echo $? > cat_rc.txt; " +
                             "find / -path /proc -prune -o -name '" + name + "' -print > found.txt 2>/dev/null; " +
                             "for d in /root /home /work /srv /opt /var /run /sys /mnt " + dir.path.string() +
                             "; do test -e $d && echo $d; done > present.txt; test -d /usr/bin && echo usr > usr.txt";
  Sandbox sb(shell_spec(dir, script));
  sb.start();
  run_to_end(&sb);
  EXPECT_NE(read_text(dir / "ws/cat_rc.txt"), "0\n");
  EXPECT_EQ(read_text(dir / "ws/cat.txt").find("top secret"), std::string::npos);
  EXPECT_EQ(read_text(dir / "ws/found.txt"), "");
  EXPECT_EQ(read_text(dir / "ws/present.txt"), "");
  EXPECT_EQ(read_text(dir / "ws/usr.txt"), "usr\n");
}

TEST(Sandbox, HostProcessesAreInvisible) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const std::string me = std::to_string(getpid());
  Sandbox sb(shell_spec(dir, "ls /proc | grep -E '^[0-9]+$' > pids.txt; test -e /proc/" + me +
                                 " && echo visible > host.txt; kill -0 " + me +
                                 " 2> /dev/null && echo signalled >> host.txt"));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/host.txt"), "");
  std::istringstream pids(read_text(dir / "ws/pids.txt"));
  int count = 0;
  for (std::string p; pids >> p;) ++count;
  EXPECT_GT(count, 0);
  EXPECT_LE(count, 6) << read_text(dir / "ws/pids.txt");  // bwrap's init, bash, ls, grep
}

TEST(Sandbox, NoNetworkReachesNothing) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  Listener host;
  ASSERT_GT(host.port, 0);
  const std::string port = std::to_string(host.port);
  Sandbox sb(shell_spec(dir, "(exec 3<>/dev/tcp/127.0.0.1/" + port + " && echo connected > net.txt) 2>/dev/null; " +
                                 "ls /sys/class/net > ifaces.txt 2>&1; true"));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/net.txt"), "");
  EXPECT_EQ(host.accepted.load(), 0);
}

SandboxSpec network_spec(const TempDir& dir, const std::string& script, const std::string& endpoint) {
  SandboxSpec spec = shell_spec(dir, script);
  spec.network = endpoint;
  spec.ro_binds = autooptim::base::self_binary_binds("/opt/autooptim/bin");
  spec.relay_binary = "/opt/autooptim/bin/" + fs::canonical("/proc/self/exe").filename().string();
  return spec;
}

TEST(Sandbox, NetworkEndpointIsTheOnlyOneReachable) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  Listener host;
  ASSERT_GT(host.port, 0);
  const std::string port = std::to_string(host.port), other = std::to_string(closed_port());
  const std::string script = "exec 3<>/dev/tcp/localhost/" + port +
                             " && read -r line <&3 && echo \"$line\" > got.txt; " + "(exec 4<>/dev/tcp/127.0.0.1/" +
                             other + " && echo open > other.txt) 2>/dev/null; " +
                             "grep -c Cap /proc/self/status > /dev/null; grep CapEff /proc/self/status > caps.txt";
  Sandbox sb(network_spec(dir, script, "localhost:" + port));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(sb.ended_how(), "exit 0") << read_text(dir / "log.txt");
  EXPECT_EQ(read_text(dir / "ws/got.txt"), "hello-from-host\n") << read_text(dir / "log.txt");
  EXPECT_EQ(read_text(dir / "ws/other.txt"), "");
  EXPECT_EQ(read_text(dir / "ws/caps.txt"), "CapEff:\t0000000000000000\n");  // sandbox-init dropped them
  EXPECT_EQ(host.accepted.load(), 1);
  EXPECT_EQ(sb.network_connections(), 1);
}

TEST(Sandbox, UnreachableEndpointIsANetworkEvent) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const std::string port = std::to_string(closed_port());
  // The relay inside accepts; the host's connection is refused, so the agent's connection closes unanswered.
  const std::string script = "exec 3<>/dev/tcp/127.0.0.1/" + port + " && read -r line <&3; echo \"[$line]\" > got.txt";
  Sandbox sb(network_spec(dir, script, "127.0.0.1:" + port));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/got.txt"), "[]\n") << read_text(dir / "log.txt");
  ASSERT_TRUE(has_event(sb, "network"));
  for (const auto& e : sb.events())
    if (e.what == "network") EXPECT_NE(e.detail.find("refused"), std::string::npos) << e.detail;
}

// A named endpoint (like api.anthropic.com): the name resolves to the relay inside and is resolved outside.
TEST(Sandbox, NamedEndpointResolvesToTheRelay) {
  SKIP_WITHOUT_SANDBOX();
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  addrinfo* found = nullptr;
  if (getaddrinfo(name, nullptr, nullptr, &found) != 0)
    GTEST_SKIP() << "this machine's name " << name << " does not resolve";
  freeaddrinfo(found);
  TempDir dir;
  Listener host(0, /*any_address=*/true);
  ASSERT_GT(host.port, 0);
  const std::string port = std::to_string(host.port);
  const std::string script = "getent hosts " + std::string(name) + " > resolved.txt; exec 3<>/dev/tcp/" + name + "/" +
                             port + " && read -r line <&3 && echo \"$line\" > got.txt";
  Sandbox sb(network_spec(dir, script, std::string(name) + ":" + port));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/resolved.txt").rfind("127.0.0.1 ", 0), 0u) << read_text(dir / "ws/resolved.txt");
  EXPECT_EQ(read_text(dir / "ws/got.txt"), "hello-from-host\n") << read_text(dir / "log.txt");
}

// Ports below 1024 (https: 443) need CAP_NET_BIND_SERVICE in the sandbox; the outside listener needs root.
TEST(Sandbox, NetworkEndpointOnALowPort) {
  SKIP_WITHOUT_SANDBOX();
  if (geteuid() != 0) GTEST_SKIP() << "listening on a port below 1024 outside needs root";
  TempDir dir;
  std::unique_ptr<Listener> host;
  for (int p = 990; p > 900 && (!host || host->port <= 0); --p) host = std::make_unique<Listener>(p);
  ASSERT_GT(host->port, 0);
  const std::string port = std::to_string(host->port);
  Sandbox sb(network_spec(dir,
                          "exec 3<>/dev/tcp/127.0.0.1/" + port + " && read -r line <&3 && echo \"$line\" > got.txt",
                          "127.0.0.1:" + port));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/got.txt"), "hello-from-host\n") << read_text(dir / "log.txt");
}

TEST(Sandbox, ForkBombHitsTheProcessLimit) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const std::string marker = unique("bombmarker");
  SandboxSpec spec = shell_spec(dir, "b(){ b | b & }; b; sleep 60");
  spec.argv.push_back(marker);  // $0 of the shell: every forked copy carries it in its command line
  spec.limits.processes = 32;
  Sandbox sb(spec);
  sb.start();
  const double took = run_to_end(&sb);
  EXPECT_TRUE(has_event(sb, "process limit")) << sb.ended_how();
  EXPECT_NE(sb.ended_how().find("killed: process limit"), std::string::npos);
  EXPECT_GE(sb.peak_processes(), 32);
  EXPECT_LT(took, 20);
  EXPECT_EQ(processes_with(marker), 0);
  for (const auto& e : sb.events()) std::cout << e.at_s << " " << e.what << ": " << e.detail << "\n";
}

TEST(Sandbox, MemoryOverTheLimitIsKilled) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  // tail keeps a line without a newline whole: 600 MiB resident.
  SandboxSpec spec = shell_spec(dir, "head -c 600M /dev/zero | tail > /dev/null; echo survived > done.txt");
  spec.limits.memory_bytes = 256LL << 20;
  Sandbox sb(spec);
  sb.start();
  run_to_end(&sb);
  EXPECT_TRUE(has_event(sb, "memory limit")) << sb.ended_how() << read_text(dir / "log.txt");
  EXPECT_EQ(read_text(dir / "ws/done.txt"), "");
  EXPECT_GT(sb.peak_rss_bytes(), 256LL << 20);
  for (const auto& e : sb.events()) std::cout << e.at_s << " " << e.what << ": " << e.detail << "\n";
}

TEST(Sandbox, WallTimeEndsIt) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  SandboxSpec spec = shell_spec(dir, "sleep 30");
  spec.limits.wall_s = 0.5;
  Sandbox sb(spec);
  sb.start();
  const double took = run_to_end(&sb);
  EXPECT_TRUE(has_event(sb, "wall time"));
  EXPECT_EQ(sb.ended_how(), "signal 9 (killed: wall time)");
  EXPECT_LT(took, 5);
}

TEST(Sandbox, DaemonsDieWithTheCommand) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const std::string marker = unique_sleep();
  Sandbox sb(shell_spec(dir, "setsid nohup " + marker + " > /dev/null 2>&1 & sleep 0.3; exit 3"));
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(sb.ended_how(), "exit 3");
  EXPECT_EQ(processes_with(marker), 0);
}

TEST(Sandbox, KillLeavesNothingBehind) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const std::string marker = unique_sleep();
  Sandbox sb(shell_spec(dir, "setsid bash -c '(setsid " + marker + " &); " + marker + "' & " + marker));
  sb.start();
  for (int i = 0; i < 40 && processes_with(marker) < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(processes_with(marker), 3);  // the three sleeps, and the shells whose scripts name them
  EXPECT_TRUE(sb.poll());
  sb.kill("test");
  EXPECT_FALSE(sb.running());
  EXPECT_EQ(processes_with(marker), 0);
  EXPECT_NE(sb.ended_how().find("killed: test"), std::string::npos);
}

TEST(Sandbox, ReadOnlyBindsCannotBeWritten) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  fs::create_directories(dir.path / "data");
  std::ofstream(dir / "data/file.txt") << "original\n";
  chmod((dir / "data/file.txt").c_str(), 0666);
  SandboxSpec spec = shell_spec(dir,
                                "echo changed > /data/file.txt; echo $? > rc1.txt; touch /data/new; echo $? > rc2.txt; "
                                "touch /usr/new 2>/dev/null; echo $? > rc3.txt; cat /data/file.txt > seen.txt");
  spec.ro_binds = {{dir / "data", "/data"}};
  Sandbox sb(spec);
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/seen.txt"), "original\n");
  EXPECT_NE(read_text(dir / "ws/rc1.txt"), "0\n");
  EXPECT_NE(read_text(dir / "ws/rc2.txt"), "0\n");
  EXPECT_NE(read_text(dir / "ws/rc3.txt"), "0\n");
  EXPECT_EQ(read_text(dir / "data/file.txt"), "original\n");
  EXPECT_FALSE(fs::exists(dir.path / "data/new"));
}

// Writable: the workspace, /tmp and /dev/shm (both bounded tmpfs); the rest of the tree is read-only.
TEST(Sandbox, OnlyWorkspaceAndBoundedTmpAreWritable) {
  SKIP_WITHOUT_SANDBOX();
  for (const bool network : {false, true}) {
    TempDir dir;
    const std::string script =
        "for p in /x /dev/x /etc/x /usr/x /run/x /proc/x /tmp/x /dev/shm/x /workspace/x; do "
        "touch $p 2>/dev/null && echo $p; done > writable.txt; echo data > /dev/null && echo null-ok > null.txt; "
        "head -c 16M /dev/zero > /tmp/big 2>/dev/null; stat -c %s /tmp/big > tmp_size.txt; rm -f /tmp/big; "
        "head -c 16M /dev/zero > /dev/shm/big 2>/dev/null; stat -c %s /dev/shm/big > shm_size.txt";
    SandboxSpec spec =
        network ? network_spec(dir, script, "127.0.0.1:" + std::to_string(closed_port())) : shell_spec(dir, script);
    spec.limits.tmp_bytes = 8LL << 20;
    Sandbox sb(spec);
    sb.start();
    run_to_end(&sb);
    EXPECT_EQ(read_text(dir / "ws/writable.txt"), "/tmp/x\n/dev/shm/x\n/workspace/x\n") << "network " << network;
    EXPECT_EQ(read_text(dir / "ws/null.txt"), "null-ok\n");
    EXPECT_LE(std::atoll(read_text(dir / "ws/tmp_size.txt").c_str()), 8LL << 20);
    EXPECT_GT(std::atoll(read_text(dir / "ws/tmp_size.txt").c_str()), 0);
    EXPECT_LE(std::atoll(read_text(dir / "ws/shm_size.txt").c_str()), 8LL << 20);
  }
}

TEST(Sandbox, EnvironmentIsExactlyTheSpec) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  setenv("SANDBOX_TEST_CANARY", "leaked", 1);
  SandboxSpec spec = shell_spec(dir, "");
  spec.env = {"PATH=/usr/bin:/bin", "FOO=bar baz", "HOME=/workspace"};
  spec.argv = {"/usr/bin/env"};
  Sandbox sb(spec);
  sb.start();
  run_to_end(&sb);
  // bwrap sets PWD, to the working folder: nothing of the host's.
  EXPECT_EQ(read_text(dir / "log.txt"), "PATH=/usr/bin:/bin\nFOO=bar baz\nHOME=/workspace\nPWD=/workspace\n");
}

TEST(Sandbox, OnlyStandardDescriptorsAreInherited) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  const int leak = open("/dev/null", O_RDONLY);  // no O_CLOEXEC: would leak without the launcher closing it
  Sandbox sb(shell_spec(dir, "ls /proc/$$/fd > fds.txt"));
  sb.start();
  run_to_end(&sb);
  close(leak);
  EXPECT_EQ(read_text(dir / "ws/fds.txt"), "0\n1\n2\n") << read_text(dir / "log.txt");
}

TEST(Sandbox, MissingBindSourceIsNamed) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  SandboxSpec spec = shell_spec(dir, "true");
  spec.ro_binds = {{"/nonexistent/sandbox/source", "/data"}};
  Sandbox sb(spec);
  try {
    sb.start();
    FAIL() << "start() accepted a missing bind source";
  } catch (const autooptim::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/sandbox/source"), std::string::npos) << e.what();
  }
}

// bwrap fails some setups only after the sandbox has started (a mount point it cannot make): named as an event.
TEST(Sandbox, SetupFailureIsASandboxEvent) {
  SKIP_WITHOUT_SANDBOX();
  TempDir dir;
  fs::create_directories(dir.path / "data");
  SandboxSpec spec = shell_spec(dir, "echo ran > ran.txt");
  spec.ro_binds = {{dir / "data", "/usr/no-such-mount-point"}};  // /usr is read-only: no folder can be made
  Sandbox sb(spec);
  sb.start();
  run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/ran.txt"), "");
  ASSERT_TRUE(has_event(sb, "sandbox")) << sb.ended_how() << " " << read_text(dir / "log.txt");
  for (const auto& e : sb.events())
    if (e.what == "sandbox") EXPECT_NE(e.detail.find("no-such-mount-point"), std::string::npos) << e.detail;
}

// As root the sandbox runs as an unprivileged uid, which must reach every bind source: start() says which not.
TEST(Sandbox, UnreachableWorkspaceIsNamed) {
  SKIP_WITHOUT_SANDBOX();
  if (geteuid() != 0) GTEST_SKIP() << "only root hands the sandbox to another uid";
  TempDir dir;
  fs::create_directories(dir.path / "locked/ws");
  chmod((dir / "locked").c_str(), 0700);
  SandboxSpec spec = shell_spec(dir, "true");
  spec.workspace = dir / "locked/ws";
  Sandbox sb(spec);
  try {
    sb.start();
    FAIL() << "start() accepted a workspace its uid cannot reach";
  } catch (const autooptim::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "locked/ws"), std::string::npos) << e.what();
  }
}

TEST(Sandbox, UnsandboxedRunsWithLimits) {
  TempDir dir;
  const std::string marker = unique_sleep();
  SandboxSpec spec = shell_spec(dir, "echo hi > out.txt; " + marker + " & " + marker);
  spec.unsandboxed = true;
  spec.limits.wall_s = 0.5;
  Sandbox sb(spec);
  sb.start();
  const double took = run_to_end(&sb);
  EXPECT_EQ(read_text(dir / "ws/out.txt"), "hi\n");
  EXPECT_TRUE(has_event(sb, "wall time"));
  EXPECT_LT(took, 5);
  EXPECT_EQ(processes_with(marker), 0);
}

TEST(Sandbox, UnsandboxedProcessLimit) {
  TempDir dir;
  const std::string marker = unique_sleep();
  SandboxSpec spec = shell_spec(dir, "for i in $(seq 100); do " + marker + " & done; wait");
  spec.unsandboxed = true;
  spec.limits.processes = 16;
  Sandbox sb(spec);
  sb.start();
  run_to_end(&sb);
  EXPECT_TRUE(has_event(sb, "process limit"));
  EXPECT_EQ(processes_with(marker), 0);
}

}  // namespace

// The binary doubles as the relay inside the sandbox (as autooptim's sandbox-init does), so that the
// network tests need no other build.
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "sandbox-init") {
    int port = 0;
    std::string socket;
    int i = 2;
    for (; i < argc && std::string(argv[i]) != "--"; i += 2) {
      if (i + 1 >= argc) return 2;
      if (std::string(argv[i]) == "--listen") port = std::atoi(argv[i + 1]);
      if (std::string(argv[i]) == "--socket") socket = argv[i + 1];
    }
    return autooptim::base::sandbox_init_main(port, socket,
                                              std::vector<std::string>(argv + std::min(i + 1, argc), argv + argc));
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
