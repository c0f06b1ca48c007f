#include "gates/integrity.h"

#include <dirent.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <torch/version.h>

#include "base/error.h"
#include "base/process_identity.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::gates {

std::vector<pid_t> thread_ids() {
  std::vector<pid_t> ids;
  DIR* d = opendir("/proc/self/task");
  if (!d) return ids;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    ids.push_back(static_cast<pid_t>(std::atol(e->d_name)));
  }
  closedir(d);
  return ids;
}

int thread_count() { return static_cast<int>(thread_ids().size()); }

using base::clock_seconds;

double this_thread_cpu_seconds() { return base::thread_cpu_seconds(); }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

double thread_cpu_seconds(pid_t tid) {
  // The kernel's per-thread CPU clock of a thread of this process (what pthread_getcpuclockid builds):
  // ((~tid) << 3) | CPUCLOCK_PERTHREAD (4) | CPUCLOCK_SCHED (2).
  const clockid_t id = static_cast<clockid_t>((~static_cast<unsigned>(tid)) << 3) | 4 | 2;
  const double s = clock_seconds(id);
  if (s >= 0) return s;
  // Fallback: the scheduler's run time in ns (first field of schedstat).
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  double ns = -1;
  if (in >> ns) return ns * 1e-9;
  return -1.0;
}

namespace {
std::mutex harness_mutex;
std::vector<pid_t> harness_ids;  // guarded by harness_mutex
}  // namespace

void capture_harness_threads() {
  std::lock_guard<std::mutex> lock(harness_mutex);
  if (harness_ids.empty()) harness_ids = thread_ids();
}

std::vector<pid_t> harness_thread_ids() {
  std::lock_guard<std::mutex> lock(harness_mutex);
  return harness_ids;
}

void ProcessMonitor::adopt_current_threads() { adopt(thread_ids()); }

void ProcessMonitor::adopt(const std::vector<pid_t>& ids) {
  own_.clear();
  for (pid_t t : ids) {
    const double cpu = thread_cpu_seconds(t);
    if (cpu >= 0) own_[t] = cpu;
  }
}

ProcessSample ProcessMonitor::sample() {
  ProcessSample s;
  const auto ids = thread_ids();
  s.threads = static_cast<int>(ids.size());
  for (auto& [tid, last] : own_) {
    const double now = thread_cpu_seconds(tid);
    if (now >= 0) last = now;  // an exited thread keeps its last-seen time (it is in the process total)
    s.own_cpu_s += last;
  }
  s.main_cpu_s = this_thread_cpu_seconds();
  s.process_cpu_s = process_cpu_seconds();
  s.wall_s = clock_seconds(CLOCK_MONOTONIC);
  return s;
}

BaselineRecords::BaselineRecords(std::string path) : path_(std::move(path)) {}

json BaselineRecords::load() const {
  std::ifstream in(path_);
  if (!in) return json{{"schema", 1}, {"keys", json::object()}};
  json j = json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("keys") || !j["keys"].is_object())
    throw Error(path_ + ": not a baseline records file (remove it to start new records)");
  return j;
}

std::vector<json> BaselineRecords::entries(const std::string& key) const {
  const json j = load();
  std::vector<json> out;
  if (j["keys"].contains(key) && j["keys"][key].contains("entries"))
    for (const auto& e : j["keys"][key]["entries"]) out.push_back(e);
  return out;
}

void BaselineRecords::append(const std::string& key, const json& identity, const json& entry, size_t keep) {
  json j = load();
  json& k = j["keys"][key];
  k["identity"] = identity;
  if (!k.contains("entries")) k["entries"] = json::array();
  k["entries"].push_back(entry);
  while (k["entries"].size() > keep) k["entries"].erase(k["entries"].begin());
  const fs::path p(path_);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const fs::path tmp = p.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    if (!out) throw Error(tmp.string() + ": cannot write the baseline records");
  }
  fs::rename(tmp, p);
}

json machine_identity() {
  std::string cpu = "cpu";
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
#ifdef NDEBUG
  const bool assertions = false;
#else
  const bool assertions = true;
#endif
#if defined(__clang__)
  const std::string compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  const std::string compiler = std::string("gcc ") + __VERSION__;
#else
  const std::string compiler = "unknown";
#endif
  return {{"host", base::host_name()},
          {"cpu", cpu},
          {"cores", std::thread::hardware_concurrency()},
          {"compiler", compiler},
          {"libtorch", TORCH_VERSION},
          {"assertions", assertions}};
}

}  // namespace autooptim::gates
