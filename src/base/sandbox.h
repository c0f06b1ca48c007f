#pragma once
// An OS sandbox for a command we do not trust (a coding agent): bubblewrap's namespaces (its own users,
// mounts, processes, network, IPC and host name), a file system of the system folders read-only plus
// the folders the caller names, rlimits, a CPU set, and a /proc monitor that counts the sandbox's
// processes and memory and kills the whole sandbox at a limit. No cgroups: they vary between machines.
// When this process runs as root the command runs as an unprivileged uid outside (uid_when_root), since
// the kernel does not enforce RLIMIT_NPROC for root. See docs/sandbox.md for what is and is not isolated.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace autooptim::base {

struct SandboxLimits {
  int64_t processes = 64;  // the monitor's cap on live processes (bwrap's init included); RLIMIT_NPROC backs it
  int64_t memory_bytes = 4LL << 30;  // the monitor's cap on the summed resident memory of the sandbox
  // RLIMIT_AS of each process, a backstop for allocations faster than the monitor's polls. 0: the larger
  // of twice memory_bytes and memory_bytes + 1 GiB; negative: none (runtimes that reserve large virtual
  // ranges, e.g. V8's WebAssembly guard regions, fail under a tight address-space limit).
  int64_t address_space_bytes = 0;
  int cpus = 2;                    // sched_setaffinity to this many of the host's allowed CPUs (0: all)
  double wall_s = 0;               // 0: no wall limit (the host kills at its own deadline)
  int64_t file_bytes = 1LL << 30;  // RLIMIT_FSIZE (the transcript is a file too)
  int64_t open_files = 1024;       // RLIMIT_NOFILE
  int64_t tmp_bytes = 1LL << 30;   // the size of /tmp and of /dev/shm inside (each a tmpfs; 0: unbounded)
};

struct SandboxSpec {
  std::string workspace;  // host folder bound read-write at /workspace (HOME and cwd inside)
  std::string channel;    // host folder bound read-write at /channel ("" none)
  std::vector<std::pair<std::string, std::string>> ro_binds;  // host path -> path inside, read-only
  std::vector<std::string> env;   // the whole environment inside ("K=V"); PATH, HOME etc. given by the caller
  std::vector<std::string> argv;  // the command inside
  std::string log_file;           // stdout+stderr of the command (its transcript), appended
  // Device nodes the command may open (a GPU's /dev/nvidia*), bound as they are; only without a network.
  std::vector<std::string> devices;
  // "" no network at all; "HOST:PORT": that one endpoint only. Inside, HOST resolves to 127.0.0.1, where
  // a relay (relay_binary's sandbox-init) carries each connection to the host, which connects to
  // HOST:PORT itself; TLS passes through untouched.
  std::string network;
  std::string relay_binary = "/opt/autooptim/bin/autooptim";  // inside path of a binary with sandbox-init
  SandboxLimits limits;
  bool unsandboxed = false;     // no bwrap (--agent-unsandboxed): plain fork/exec, same limits, own process group
  uid_t uid_when_root = 65534;  // (and gid) the command's uid when this process is root; give concurrent
                                // sandboxes distinct uids: RLIMIT_NPROC counts all processes of a uid
};

struct SandboxEvent {
  // "process limit", "memory limit", "wall time", "killed", "exit", "network" (the endpoint failed),
  // "sandbox" (bwrap could not set the sandbox up: its message)
  std::string what;
  std::string detail;
  double at_s;  // seconds since start()
};

// "" when bwrap and user namespaces work here, else why not (bwrap missing, or a trial sandbox failed,
// with bwrap's message). Cached after the first call.
std::string sandbox_unavailable_reason();

// The running binary (bound at INSIDE_BIN_DIR/its name), the shared libraries next to it, and every
// shared library this process has mapped outside the system folders (a libtorch in a build tree), each
// at its own path: ro_binds with which the binary runs inside the sandbox on any machine.
std::vector<std::pair<std::string, std::string>> self_binary_binds(const std::string& inside_bin_dir);
// The same for another binary built with this one (a test's, naming the real autooptim): `binary`, the modules
// next to it, and the libraries this process maps.
std::vector<std::pair<std::string, std::string>> binary_binds(const std::string& binary,
                                                              const std::string& inside_bin_dir);

class SandboxMonitor;
class HostRelay;

class Sandbox {
 public:
  explicit Sandbox(SandboxSpec spec);
  ~Sandbox();  // kills what is still running
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Starts the command and returns once the sandbox runs. Throws Error naming the problem (bwrap missing,
  // a bind source missing, fork failed, bwrap's own message when it could not set the sandbox up). The
  // sandbox dies with the thread that calls it (PR_SET_PDEATHSIG): call it from one that outlives it.
  void start();
  // Enforces the limits (kills the whole sandbox when one is exceeded, recording the event); false once
  // the command has ended and been reaped. Call it often (every 50-200 ms): the monitor only sees what
  // it samples.
  bool poll();
  // SIGKILL everything in it (the pid namespace's init: the kernel kills the rest) and reaps; records
  // {"killed", why}. Nothing is left behind, daemons that called setsid included.
  void kill(const std::string& why);

  bool running() const;
  int exit_status() const;        // bwrap's (or unsandboxed, the command's) wait status, valid once ended
  std::string ended_how() const;  // "exit 0", "signal 9 (killed: wall time)" ...
  const std::vector<SandboxEvent>& events() const;
  int64_t peak_processes() const;
  int64_t peak_rss_bytes() const;
  double cpu_s() const;
  pid_t pid() const { return pid_; }  // bwrap (or the unsandboxed command), leader of its process group
  int64_t network_connections() const;

 private:
  void check_spec() const;
  void check_reachable(uid_t uid) const;
  void prepare_network();
  void launch(const std::vector<std::string>& args);
  void await_sandbox_init();
  void record(const std::string& what, const std::string& detail);
  bool check_limits();
  void finish(int status);
  void kill_unsandboxed();
  void take_relay_events();
  double elapsed_s() const;

  SandboxSpec spec_;
  pid_t pid_ = -1;
  pid_t init_pid_ = -1;  // the sandbox's pid-namespace init, seen from here
  int init_pidfd_ = -1;  // a pidfd for it (no pid reuse races when killing)
  int status_fd_ = -1;   // bwrap's --json-status-fd
  bool ended_ = false;
  int status_ = 0;
  std::string killed_why_;
  double start_s_ = 0;
  std::vector<SandboxEvent> events_;
  std::unique_ptr<SandboxMonitor> monitor_;
  std::unique_ptr<HostRelay> relay_;
  std::string net_dir_;  // the host folder holding the relay's socket and the hosts file
};

}  // namespace autooptim::base
