#include "base/sandbox_monitor.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace autooptim::base {
namespace {

struct ProcStat {
  pid_t pid = 0, ppid = 0, pgrp = 0;
  char state = '?';
  int64_t ticks = 0;  // utime + stime + cutime + cstime
  int64_t rss_pages = 0;
};

// /proc/PID/stat: "pid (comm) state ppid pgrp session ... utime(14) stime cutime cstime ... rss(24)".
// comm may hold spaces and parentheses: the fields start after the last ')'.
bool read_stat(pid_t pid, ProcStat* out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> f;
  for (std::string s; fields >> s;) f.push_back(s);
  if (f.size() < 22) return false;  // f[0] is field 3 (state)
  out->pid = pid;
  out->state = f[0][0];
  out->ppid = static_cast<pid_t>(std::atol(f[1].c_str()));
  out->pgrp = static_cast<pid_t>(std::atol(f[2].c_str()));
  out->ticks =
      std::atoll(f[11].c_str()) + std::atoll(f[12].c_str()) + std::atoll(f[13].c_str()) + std::atoll(f[14].c_str());
  out->rss_pages = std::atoll(f[21].c_str());
  return true;
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> pids;
  DIR* d = opendir("/proc");
  if (!d) return pids;
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && end && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return pids;
}

}  // namespace

std::string pid_namespace_of(pid_t pid) {
  char buf[64];
  const std::string link = "/proc/" + std::to_string(pid) + "/ns/pid";
  const ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

int64_t processes_of_uid(uid_t uid) {
  int64_t count = 0;
  for (const pid_t pid : all_pids()) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Uid:", 0) != 0) continue;
      if (static_cast<uid_t>(std::atoll(line.c_str() + 4)) == uid) ++count;
      break;
    }
  }
  return count;
}

SandboxMonitor SandboxMonitor::of_namespace(pid_t init) {
  SandboxMonitor m;
  m.pid_ns_ = pid_namespace_of(init);
  m.leader_ = init;
  return m;
}

SandboxMonitor SandboxMonitor::of_group(pid_t leader) {
  SandboxMonitor m;
  m.leader_ = leader;
  return m;
}

ProcessSample SandboxMonitor::sample() {
  std::unordered_map<pid_t, ProcStat> procs;
  std::unordered_map<pid_t, std::vector<pid_t>> children;
  std::vector<pid_t> seeds;
  for (const pid_t pid : all_pids()) {
    ProcStat s;
    if (!read_stat(pid, &s)) continue;
    procs[pid] = s;
    children[s.ppid].push_back(pid);
    const bool seed = pid_ns_.empty() ? (s.pgrp == leader_ || pid == leader_) : pid_namespace_of(pid) == pid_ns_;
    if (seed) seeds.push_back(pid);
  }
  // Descendants of members are members: a nested pid namespace, or a child that left the process group.
  ProcessSample out;
  std::unordered_map<pid_t, bool> member;
  while (!seeds.empty()) {
    const pid_t pid = seeds.back();
    seeds.pop_back();
    if (member[pid]) continue;
    member[pid] = true;
    const char state = procs[pid].state;
    if (state != 'Z' && state != 'X') out.pids.push_back(pid);  // a zombie holds nothing but its pid
    for (const pid_t c : children[pid]) seeds.push_back(c);
  }
  static const int64_t page = sysconf(_SC_PAGESIZE), hz = sysconf(_SC_CLK_TCK);
  int64_t ticks = 0;
  for (const pid_t pid : out.pids) {
    out.rss_bytes += procs[pid].rss_pages * page;
    ticks += procs[pid].ticks;
  }
  out.cpu_s = static_cast<double>(ticks) / static_cast<double>(hz);
  peak_processes_ = std::max<int64_t>(peak_processes_, static_cast<int64_t>(out.pids.size()));
  peak_rss_bytes_ = std::max(peak_rss_bytes_, out.rss_bytes);
  cpu_s_ = std::max(cpu_s_, out.cpu_s);
  return out;
}

}  // namespace autooptim::base
