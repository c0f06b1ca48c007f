#pragma once
// Which executor processes a run started (outbox/<family>.pid.json: pid, start time, host), so that a run
// resumed in the same folder can stop those its killed orchestrator left behind. An orphaned executor
// otherwise goes on beside the new ones: it finishes its trial in progress and writes requests into the
// resumed run's queue (issue 38).
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace autooptim::orchestrator {

void record_executor(const std::filesystem::path& out, const std::string& family, pid_t pid);
void forget_executor(const std::filesystem::path& out, const std::string& family);

// The recorded executors still alive on this host (the same pid and start time): SIGKILL, then waited
// for (up to wait_s each). Returns one line per executor stopped; the records are removed.
std::vector<std::string> stop_orphaned_executors(const std::filesystem::path& out, double wait_s = 5.0);

}  // namespace autooptim::orchestrator
