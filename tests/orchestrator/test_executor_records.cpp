// The executors a run records, and what a resumed run does with those its killed orchestrator left alive:
// real processes (sleep), stopped only when their pid, start time and host all match.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/process_identity.h"
#include "orchestrator/executor_records.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::test {
namespace {

// A child that would run for ten minutes.
pid_t start_sleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    execlp("sleep", "sleep", "600", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Its start time is readable once the kernel has it (at once, but /proc shows the exec a moment later).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return pid;
}

bool alive(pid_t pid) { return base::process_start_ticks(pid) != 0; }

void reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

TEST(ExecutorRecords, AResumedRunStopsTheExecutorItsKilledOrchestratorLeft) {
  TempDir tmp;
  const fs::path out = tmp.file("run");
  fs::create_directories(out / "outbox");
  const pid_t pid = start_sleeper();
  ASSERT_GT(pid, 0);
  orchestrator::record_executor(out, "cache", pid);
  const json r = json::parse(std::ifstream(out / "outbox" / "cache.pid.json"));
  EXPECT_EQ(r["pid"], pid);
  EXPECT_EQ(r["host"], base::host_name());
  EXPECT_EQ(r["start_ticks"].get<uint64_t>(), base::process_start_ticks(pid));
  const auto lines = orchestrator::stop_orphaned_executors(out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "executor cache (pid " + std::to_string(pid) + ") left running by the previous run: stopped");
  EXPECT_FALSE(alive(pid));
  EXPECT_FALSE(fs::exists(out / "outbox" / "cache.pid.json"));
  reap(pid);
}

// The pid alone is not the process: a record whose start time or host differs names another process
// (the pid reused after the executor ended), which is left alone.
TEST(ExecutorRecords, AnotherProcessWithTheRecordedPidIsLeftAlone) {
  TempDir tmp;
  const fs::path out = tmp.file("run");
  fs::create_directories(out / "outbox");
  const pid_t pid = start_sleeper();
  const uint64_t ticks = base::process_start_ticks(pid);
  ASSERT_NE(ticks, 0u);
  auto write = [&](const std::string& fam, uint64_t t, const std::string& host) {
    std::ofstream(out / "outbox" / (fam + ".pid.json"))
        << json{{"family", fam}, {"pid", pid}, {"start_ticks", t}, {"host", host}}.dump();
  };
  write("kernel", ticks + 1, base::host_name());
  write("sparse", ticks, "another-host-" + base::host_name());
  EXPECT_TRUE(orchestrator::stop_orphaned_executors(out).empty());
  EXPECT_TRUE(alive(pid));
  EXPECT_FALSE(fs::exists(out / "outbox" / "kernel.pid.json"));  // read once, then dropped
  orchestrator::forget_executor(out, "cache");                   // nothing recorded: no error
  reap(pid);
  EXPECT_FALSE(alive(pid));
}

}  // namespace autooptim::test
