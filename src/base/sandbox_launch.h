#pragma once
// Starting a confined process: its own process group, rlimits, a CPU set, an unprivileged uid when we are
// root, output to a log, nothing inherited but what is named. Shared by the sandbox (which starts bwrap
// this way) and the unsandboxed mode (which starts the command itself).
#include <sys/types.h>

#include <string>
#include <vector>

#include "base/sandbox.h"

namespace autooptim::base {

struct ConfinedLaunch {
  std::string program;            // an absolute path
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the whole environment
  std::string cwd;                // "" keep
  std::string log_file;           // stdout+stderr, appended; unless output_fd >= 0
  int output_fd = -1;
  std::vector<int> keep_fds;  // descriptors passed on; every other one above stderr is closed
  bool apply_limits = true;
  SandboxLimits limits;
  int64_t nproc = 0;            // RLIMIT_NPROC (0: none)
  uid_t uid_when_root = 65534;  // with gid the same
};

// Forks and execs; the child dies with this process (PR_SET_PDEATHSIG). Everything is prepared before the
// fork: the child makes async-signal-safe calls only and, when one fails, writes why to its output and
// exits 126 (127: exec failed). Throws Error when fork fails.
pid_t launch_confined(const ConfinedLaunch& launch);

// The uid the child runs as: ours, or uid_when_root when we are root.
uid_t confined_uid(uid_t uid_when_root);

// The paths of `paths` that uid (and gid) `uid`, without supplementary groups, cannot reach (a folder
// above one it may not search): bwrap, running as that uid, could not bind them. Checked in a child
// that takes the uid; empty when we are not root.
std::vector<std::string> unreachable_paths(uid_t uid, const std::vector<std::string>& paths);

// `name` found on the PATH of `env` (or this process's PATH), "" when it is nowhere; a name with a '/'
// is returned as is.
std::string find_program(const std::string& name, const std::vector<std::string>& env);

}  // namespace autooptim::base
