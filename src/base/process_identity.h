#pragma once
// Who a process is beyond its pid, which the kernel reuses: its host and its start time. A record of a
// process (an executor, a worker) names all three, so that a later run can tell whether it still lives.
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace autooptim::base {

std::string host_name();  // gethostname; "?" when it fails

// The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); 0 when there is no
// such process (or it is a zombie waiting to be reaped).
uint64_t process_start_ticks(pid_t pid);

// True when `pid` on this host is the process that started at `start_ticks`.
bool same_process_alive(pid_t pid, uint64_t start_ticks);

}  // namespace autooptim::base
