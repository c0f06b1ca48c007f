#include "orchestrator/executor_records.h"

#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/json_file.h"
#include "base/process_identity.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {

namespace {

fs::path record_path(const fs::path& out, const std::string& family) { return out / "outbox" / (family + ".pid.json"); }

bool wait_gone(pid_t pid, uint64_t start_ticks, double wait_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (base::same_process_alive(pid, start_ticks)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

void record_executor(const fs::path& out, const std::string& family, pid_t pid) {
  base::write_json_file(record_path(out, family).string(), json{{"family", family},
                                                                {"pid", static_cast<int64_t>(pid)},
                                                                {"start_ticks", base::process_start_ticks(pid)},
                                                                {"host", base::host_name()}});
}

void forget_executor(const fs::path& out, const std::string& family) {
  std::error_code ec;
  fs::remove(record_path(out, family), ec);
}

std::vector<std::string> stop_orphaned_executors(const fs::path& out, double wait_s) {
  std::vector<std::string> stopped;
  std::error_code ec;
  if (!fs::is_directory(out / "outbox", ec)) return stopped;
  for (const auto& e : fs::directory_iterator(out / "outbox", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 9 || name.compare(name.size() - 9, 9, ".pid.json") != 0) continue;
    std::ifstream in(e.path());
    const json r = json::parse(in, nullptr, false);
    in.close();
    fs::remove(e.path(), ec);
    if (!r.is_object() || r.value("host", "") != base::host_name()) continue;
    const pid_t pid = static_cast<pid_t>(r.value("pid", int64_t{0}));
    const uint64_t ticks = r.value("start_ticks", uint64_t{0});
    if (!base::same_process_alive(pid, ticks)) continue;
    kill(pid, SIGKILL);
    const bool gone = wait_gone(pid, ticks, wait_s);
    stopped.push_back("executor " + r.value("family", std::string("?")) + " (pid " + std::to_string(pid) +
                      ") left running by the previous run: " + (gone ? "stopped" : "sent SIGKILL, still there"));
  }
  return stopped;
}

}  // namespace autooptim::orchestrator
