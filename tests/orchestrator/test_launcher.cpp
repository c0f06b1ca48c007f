// The Slurm launcher against a real single-node Slurm (tests/slurm/cluster.sh: munged, slurmctld,
// slurmd, started here and stopped at the end): the workers go in as a job array whose tasks register in
// the run folder, a task cancelled with scancel is noticed and replaced, stop() sends them all home, and
// a submission Slurm refuses is an Error with sbatch's reason. The task's program here is a small shell
// worker that registers and waits for RUN/stop (the launcher only starts processes; the real worker's
// use through `run --launcher slurm` is tests/slurm/test_run_slurm.sh). Skipped without Slurm or root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "orchestrator/launcher.h"
#include "base/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
namespace orch = autooptim::orchestrator;
using nlohmann::json;

namespace {

const std::string kCluster = std::string(AUTOOPTIM_SOURCE_DIR) + "/tests/slurm/cluster.sh";

bool have(const char* tool) { return orch::run_command({"sh", "-c", std::string("command -v ") + tool}).status == 0; }

class SlurmCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0 || !have("slurmctld") || !have("munged") || !have("sbatch")) {
      skip_ = "needs root and slurm-wlm, slurm-client, munge (scripts/install-deps.sh)";
      return;
    }
    dir_ = new autooptim::test::TempDir();
    const auto r = orch::run_command({kCluster, "start", dir_->file("cluster")}, 120);
    ASSERT_EQ(r.status, 0) << "cluster.sh start failed: " << r.err << r.out;
    setenv("SLURM_CONF", dir_->file("cluster/slurm.conf").c_str(), 1);
  }
  static void TearDownTestSuite() {
    if (dir_) {
      orch::run_command({kCluster, "stop", dir_->file("cluster")}, 120);
      delete dir_;
      dir_ = nullptr;
    }
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    run_ = dir_->path() / ("run-" + std::to_string(++runs_));
    fs::create_directories(run_);
    // The stand-in worker: registers with what Slurm told it, then serves until RUN/stop.
    worker_ = (run_ / "fake-worker.sh").string();
    std::ofstream(worker_)
        << "#!/bin/sh\n"
           "run=$3; id=$5\n"
           "mkdir -p \"$run/workers/$id\"\n"
           "printf "
           "'{\"id\":\"%s\",\"job\":\"%s\",\"array_job\":\"%s\",\"task\":\"%s\",\"host\":\"%s\",\"args\":\"%s\"}\\n' "
           "\"$id\" \"$SLURM_JOB_ID\" \"$SLURM_ARRAY_JOB_ID\" \"$SLURM_ARRAY_TASK_ID\" \"$(hostname)\" \"$*\" > "
           "\"$run/workers/$id/worker.json.tmp\"\n"
           "mv \"$run/workers/$id/worker.json.tmp\" \"$run/workers/$id/worker.json\"\n"
           "while [ ! -e \"$run/stop\" ]; do sleep 0.2; done\n";
    fs::permissions(worker_, fs::perms::owner_all);
  }
  orch::SlurmOptions options(int64_t workers) const {
    orch::SlurmOptions o;
    o.run_dir = run_.string();
    o.binary = worker_;
    o.model_cli = {"--model", "wan22-tiny", "--device", "cpu"};
    o.workers = workers;
    o.poll_s = 0.5;
    return o;
  }
  // Waits (up to timeout_s) until pred() holds.
  template <class F>
  static bool eventually(F pred, double timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return pred();
  }
  json registration(const std::string& id) const {
    std::ifstream in(run_ / "workers" / id / "worker.json");
    std::stringstream s;
    s << in.rdbuf();
    return s.str().empty() ? json() : json::parse(s.str());
  }
  std::string squeue_state(const std::string& task) const {
    auto r = orch::run_command({"squeue", "-h", "-t", "all", "-j", task, "-o", "%T"});
    std::string s = r.out;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

  static inline autooptim::test::TempDir* dir_ = nullptr;
  static inline std::string skip_;
  static inline int runs_ = 0;
  fs::path run_;
  std::string worker_;
};

}  // namespace

TEST_F(SlurmCluster, ArrayTasksRegisterInTheRunFolderAndStopSendsThemHome) {
  orch::SlurmLauncher l(options(2));
  l.start();
  ASSERT_EQ(l.job_ids().size(), 1u);
  const std::string job = l.job_ids()[0];
  // The script is what a user would submit by hand: one worker per task, the run folder, the model.
  std::ifstream sf(l.script_path());
  std::stringstream script;
  script << sf.rdbuf();
  EXPECT_NE(script.str().find("--worker-id \"slurm-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}\""), std::string::npos)
      << script.str();
  EXPECT_NE(script.str().find("#SBATCH --cpus-per-task=1"), std::string::npos);

  for (int64_t t : {0, 1}) {
    const std::string id = orch::SlurmLauncher::worker_id(job, t);
    ASSERT_TRUE(eventually([&] { return !registration(id).is_null(); }, 60)) << id << " never registered";
    const json reg = registration(id);
    EXPECT_EQ(reg["array_job"], job);           // it ran as a task of our array ...
    EXPECT_EQ(reg["task"], std::to_string(t));  // ... this task
    EXPECT_NE(
        reg["args"].get<std::string>().find("worker --serve " + fs::absolute(run_).string() + " --worker-id " + id),
        std::string::npos)
        << reg;
    EXPECT_NE(reg["args"].get<std::string>().find("--model wan22-tiny"), std::string::npos) << reg;
    EXPECT_EQ(squeue_state(job + "_" + std::to_string(t)), "RUNNING");
  }
  EXPECT_TRUE(l.check().empty());
  EXPECT_FALSE(l.all_gone());

  l.stop(30);
  EXPECT_TRUE(l.all_gone());
  EXPECT_TRUE(fs::exists(run_ / "stop"));
  for (const auto& t : l.describe()["tasks"])
    EXPECT_EQ(t["state"], "COMPLETED") << t;  // left on RUN/stop, not cancelled
  EXPECT_EQ(squeue_state(job + "_0"), "COMPLETED");
  EXPECT_TRUE(l.check().empty());  // a stop is not a death
}

TEST_F(SlurmCluster, ACancelledTaskIsDetectedAndReplaced) {
  orch::SlurmLauncher l(options(2));
  l.start();
  const std::string job = l.job_ids()[0];
  const std::string victim = orch::SlurmLauncher::worker_id(job, 1);
  ASSERT_TRUE(eventually([&] { return !registration(victim).is_null(); }, 60));

  ASSERT_EQ(orch::run_command({"scancel", job + "_1"}).status, 0);
  std::vector<std::string> died;
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& d : l.check()) died.push_back(d);
        return !died.empty();
      },
      60))
      << l.describe().dump(1);
  ASSERT_EQ(died, std::vector<std::string>{victim});
  const json d = l.describe();
  ASSERT_EQ(d["jobs"].size(), 2u) << d.dump(1);  // the replacement's submission
  EXPECT_EQ(d["replacements"], 1);
  bool cancelled = false;
  for (const auto& t : d["tasks"])
    if (t["worker"] == victim) cancelled = t["state"] == "CANCELLED";
  EXPECT_TRUE(cancelled) << d.dump(1);
  const std::string events = d["events"].dump();
  EXPECT_NE(events.find("CANCELLED"), std::string::npos) << events;
  const std::string replacement = orch::SlurmLauncher::worker_id(d["jobs"][1].get<std::string>(), 1);
  EXPECT_NE(events.find("replaced by " + replacement), std::string::npos) << events;
  ASSERT_TRUE(eventually([&] { return !registration(replacement).is_null(); }, 60))
      << "the replacement never registered";
  EXPECT_EQ(l.worker_ids(), (std::vector<std::string>{orch::SlurmLauncher::worker_id(job, 0), victim, replacement}));
  EXPECT_EQ(registration(orch::SlurmLauncher::worker_id(job, 0))["task"], "0");  // the other worker was left alone

  l.stop(30);
  EXPECT_TRUE(l.all_gone());
}

TEST_F(SlurmCluster, NoReplacementAfterNoRestarts) {
  orch::SlurmLauncher l(options(1));
  l.start();
  l.no_restarts();  // what an interrupted run says before its workers go
  const std::string job = l.job_ids()[0];
  ASSERT_TRUE(eventually([&] { return !registration(orch::SlurmLauncher::worker_id(job, 0)).is_null(); }, 60));
  ASSERT_EQ(orch::run_command({"scancel", job}).status, 0);
  std::vector<std::string> died;
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& d : l.check()) died.push_back(d);
        return !died.empty();
      },
      60));
  EXPECT_TRUE(l.all_gone());
  EXPECT_EQ(l.describe()["jobs"].size(), 1u);
  EXPECT_NE(l.describe()["events"].dump().find("not replaced"), std::string::npos);
}

TEST_F(SlurmCluster, ASubmissionSlurmRefusesIsAnErrorWithItsReason) {
  auto o = options(1);
  o.partition = "no-such-partition";
  orch::SlurmLauncher l(o);
  try {
    l.start();
    FAIL() << "sbatch accepted a job for a partition that does not exist";
  } catch (const autooptim::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sbatch"), std::string::npos) << m;
    EXPECT_NE(m.find("artition"), std::string::npos) << m;  // sbatch's "invalid partition specified"
  }
}

TEST_F(SlurmCluster, PreemptedTasksAreDetectedAndReplaced) {
  // Both CPUs of the node go to the two workers; a job of the higher-tier partition "urgent" that needs
  // both pre-empts them (cluster.sh: PreemptType=preempt/partition_prio, PreemptMode=CANCEL).
  orch::SlurmLauncher l(options(2));
  l.start();
  const std::string job = l.job_ids()[0];
  for (int64_t t : {0, 1})
    ASSERT_TRUE(eventually([&] { return !registration(orch::SlurmLauncher::worker_id(job, t)).is_null(); }, 60));
  const auto urgent =
      orch::run_command({"sbatch", "--parsable", "-p", "urgent", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 3"});
  ASSERT_EQ(urgent.status, 0) << urgent.err;
  std::set<std::string> died;
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& d : l.check()) died.insert(d);
        return died.size() == 2;
      },
      60))
      << l.describe().dump(1);
  EXPECT_EQ(died,
            (std::set<std::string>{orch::SlurmLauncher::worker_id(job, 0), orch::SlurmLauncher::worker_id(job, 1)}));
  const json d = l.describe();
  for (const auto& t : d["tasks"])
    if (t["job"] == job) EXPECT_EQ(t["state"], "PREEMPTED") << t;
  EXPECT_EQ(d["replacements"], 2);
  EXPECT_NE(d["events"].dump().find("ended PREEMPTED"), std::string::npos) << d["events"].dump(1);
  // The replacements wait for the urgent job, then run and register.
  for (const auto& t : d["tasks"]) {
    if (t["job"] == job) continue;
    const std::string id = t["worker"].get<std::string>();
    EXPECT_TRUE(eventually([&] { return !registration(id).is_null(); }, 60))
        << "replacement " << id << " never registered";
  }
  l.stop(30);
  EXPECT_TRUE(l.all_gone());
}
