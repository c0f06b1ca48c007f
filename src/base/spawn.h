#pragma once
// Starting a child autooptim process (an executor, a worker) the same way everywhere.
#include <sys/types.h>

#include <string>
#include <vector>

namespace autooptim::runtime {

struct SelfSpawn {
  std::vector<std::string> args;  // argv, args[0] included ("autooptim")
  std::vector<std::string> env;   // the child's whole environment ("KEY=value")
  std::string log_file;           // its stdout and stderr
  bool truncate_log = true;       // else appended (a restarted worker keeps its earlier lines)
  std::string header;             // written to the log before exec, ending in a newline
  std::string what;               // for the error message: "an executor", "a worker"
};

// Runs /proc/self/exe with `s`. The child stays in this process's group (a signal to the group reaches
// it), gets SIGTERM when this process dies (PR_SET_PDEATHSIG), and starts with SIGINT/SIGTERM blocked,
// so that a signal arriving before it installs its handlers waits for them instead of killing it with
// an empty log; the header line is in the log before exec for the same reason. Everything is prepared
// before fork: the child makes async-signal-safe calls only. Throws Error when fork fails.
pid_t spawn_self(const SelfSpawn& s);

// The last non-empty line of a child's log (why it failed), cut at 300 characters; "" when there is none.
std::string last_log_line(const std::string& path);

// This process's environment with the variables named in `drop` ("KEY") removed and `add` appended.
std::vector<std::string> environment_with(const std::vector<std::string>& drop, const std::vector<std::string>& add);

}  // namespace autooptim::runtime
