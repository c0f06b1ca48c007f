#pragma once
// The sandbox's processes, found in /proc: how many are alive, their summed resident memory and CPU
// time. No cgroups (they differ between machines); a sample is a scan of /proc.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace autooptim::base {

struct ProcessSample {
  std::vector<pid_t> pids;  // the members alive now
  int64_t rss_bytes = 0;    // summed (pages shared between members count once per member)
  double cpu_s = 0;         // user + system time of the members and of the children they reaped
};

class SandboxMonitor {
 public:
  // The processes in the pid namespace of `init` (and in namespaces nested in it: any descendant).
  static SandboxMonitor of_namespace(pid_t init);
  // The process group `leader` leads and every descendant of a member (a child that left the group with
  // setsid while its parent lives; an orphan reparented to the host's init is lost).
  static SandboxMonitor of_group(pid_t leader);

  ProcessSample sample();
  int64_t peak_processes() const { return peak_processes_; }
  int64_t peak_rss_bytes() const { return peak_rss_bytes_; }
  double cpu_s() const { return cpu_s_; }

 private:
  SandboxMonitor() = default;
  std::string pid_ns_;  // "pid:[inode]" of the namespace, or "" for a process group
  pid_t leader_ = -1;
  int64_t peak_processes_ = 0, peak_rss_bytes_ = 0;
  double cpu_s_ = 0;
};

// The pid namespace link ("pid:[inode]") of a process, "" when it is gone.
std::string pid_namespace_of(pid_t pid);

// The number of live processes whose real uid is `uid`.
int64_t processes_of_uid(uid_t uid);

}  // namespace autooptim::base
