// Workers (docs/workers.md) as real processes of the real binary: one model load serves several client
// processes, a killed worker's request is finished by another, and `run` uses them for staged
// evaluation, the cross-run baseline cache, --plan and several workers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "gates/prompts.h"
#include "workers/messages.h"
#include "workers/protocol.h"
#include "workers/trial_result.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kSrc = AUTOOPTIM_SOURCE_DIR;
const char* kReduced =
    "--model wan22-tiny --frames 5 --steps 2 --height 64 --width 96 --max-prompts 1 --repeats 1 --executor-trials 1";

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Result {
  int code;
  std::string out, err;
};

// Runs the binary in the source folder with extra environment; stdout and stderr apart.
Result sh(const autooptim::test::TempDir& tmp, const std::string& env, const std::string& args) {
  const std::string cmd = "cd " + kSrc + " && env AUTOOPTIM_TTY=0 " + env + " " + AUTOOPTIM_BIN + " " + args + " >" +
                          tmp.file("out") + " 2>" + tmp.file("err");
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(tmp.file("out")), slurp(tmp.file("err"))};
}

// Starts `autooptim ARGS` in the background (stdout+stderr to log); returns its pid.
pid_t spawn(const std::string& env, const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string cmd =
        "cd " + kSrc + " && exec env " + env + " " + AUTOOPTIM_BIN + " " + args + " >" + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::string> lines(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

// The tiny baseline at a reduced size (seconds per gate run).
std::string small_baseline(const autooptim::test::TempDir& tmp) {
  json m = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  m["config"]["frames"] = 5;
  m["config"]["steps"] = 2;
  m["config"]["height"] = 64;
  m["config"]["width"] = 96;
  std::ofstream(tmp.file("small.json")) << m.dump();
  return tmp.file("small.json");
}

bool wait_for(const std::function<bool()>& f, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

}  // namespace

TEST(Workers, OneWorkerServesTwoExecutorProcessesWithOneModelLoaded) {
  autooptim::test::TempDir tmp;
  const std::string run = tmp.file("run"), loads = tmp.file("loads.log");
  const std::string env = "AUTOOPTIM_LOAD_LOG=" + loads;
  const pid_t worker =
      spawn(env, "worker --serve " + run + " --worker-id cpu0 --model wan22-tiny", tmp.file("worker.log"));
  const std::string base = small_baseline(tmp);
  std::vector<pid_t> clients;
  for (const char* fam : {"kernel", "sparse"})
    clients.push_back(spawn(env,
                            std::string("executor --family ") + fam + " --model wan22-tiny --serve " + run +
                                " --base " + base + " --prompts prompts/visible.jsonl --outbox " +
                                tmp.file(std::string("outbox-") + fam) + " --budget-trials 2",
                            tmp.file(std::string(fam) + ".log")));
  for (size_t i = 0; i < clients.size(); ++i)
    EXPECT_EQ(wait_exit(clients[i]), 0) << slurp(tmp.file(i == 0 ? "kernel.log" : "sparse.log"));
  autooptim::workers::stop_all(run);
  EXPECT_EQ(wait_exit(worker), 0) << slurp(tmp.file("worker.log"));
  // Exactly one model load among the three processes: the worker's.
  const auto l = lines(loads);
  ASSERT_EQ(l.size(), 1u) << slurp(loads);
  EXPECT_EQ(l[0], std::to_string(worker) + " wan22-tiny");
  // Both clients got trial answers from that one worker.
  std::set<std::string> clients_served;
  int trials = 0;
  for (const auto& e : fs::directory_iterator(fs::path(run) / "responses")) {
    // Each as the worker wrote it reads as the typed response: every key there, of its type.
    const auto r = autooptim::workers::Response::from_json(json::parse(slurp(e.path())), e.path().string());
    EXPECT_TRUE(r.ok) << r.to_json().dump();
    EXPECT_EQ(r.worker, "cpu0");
    ASSERT_TRUE(r.counters.has_value());
    EXPECT_GT(r.counters->generations, 0);
    if (r.kind == "trial") ++trials;
    clients_served.insert(r.id.substr(0, r.id.find('-', 9)));
  }
  EXPECT_GE(trials, 2);
  EXPECT_EQ(clients_served, (std::set<std::string>{"executor-kernel", "executor-sparse"}));
  for (const char* fam : {"kernel", "sparse"})
    EXPECT_FALSE(lines(tmp.file(std::string("outbox-") + fam) + "/trials.jsonl").empty()) << fam;
  const json reg = json::parse(slurp(fs::path(run) / "workers" / "cpu0" / "worker.json"));
  EXPECT_EQ(reg["state"], "stopped");
  EXPECT_GE(reg["final"]["requests"].get<int>(), 2);
}

// Issue 37: a worker that reuses its trials' baseline runs (the default on a CUDA device) makes the baseline's
// clip of a prompt once; a later trial on it runs the candidate only, against the same clip and time. Made
// fresh (the default on a CPU), every trial runs the baseline.
TEST(Workers, TrialsReuseTheWorkersBaselineRunWhereAsked) {
  for (const std::string mode : {"reuse", "fresh"}) {
    autooptim::test::TempDir tmp;
    const std::string run = tmp.file("run");
    const pid_t w = spawn("", "worker --serve " + run + " --worker-id w --model wan22-tiny --trial-baselines " + mode,
                          tmp.file("w.log"));
    autooptim::workers::Client client(run, "test");
    const auto prompts = autooptim::gates::load_prompts(kSrc + "/prompts", false).split("smoke");
    autooptim::workers::TrialRequest t;
    t.base = autooptim::gates::load_manifest(small_baseline(tmp));
    t.prompts = {prompts.at(0)};
    t.n = 1;
    std::vector<autooptim::workers::Response> answers;
    for (const char* flag : {"cross_kv_cache", "timestep_dedup"}) {
      t.flags = {{flag, true}};
      t.label = flag;
      answers.push_back(client.call(t.to_json()));
    }
    autooptim::workers::stop_all(run);
    EXPECT_EQ(wait_exit(w), 0) << slurp(tmp.file("w.log"));
    for (const auto& a : answers) ASSERT_TRUE(a.ok && a.counters) << a.to_json().dump();
    const auto first = autooptim::workers::TrialResult::from_json(answers[0].result);
    const auto second = autooptim::workers::TrialResult::from_json(answers[1].result);
    EXPECT_EQ(first.baselines_reused, 0) << mode;
    EXPECT_EQ(answers[0].counters->generations, 3) << mode;  // the warm-up, the baseline, the candidate
    if (mode == "reuse") {
      EXPECT_EQ(second.baselines_reused, 1);
      EXPECT_EQ(answers[1].counters->generations, 1);  // the candidate only
      EXPECT_DOUBLE_EQ(second.baseline_s, first.baseline_s);
      EXPECT_GT(second.psnr_min, 40.0);  // both lossless against the same kept clip
    } else {
      EXPECT_EQ(second.baselines_reused, 0);
      EXPECT_EQ(answers[1].counters->generations, 2);
    }
  }
}

TEST(Workers, AKilledWorkersRequestIsRequeuedAndFinishedByAnother) {
  autooptim::test::TempDir tmp;
  const std::string run = tmp.file("run");
  const pid_t a = spawn("", "worker --serve " + run + " --worker-id a --model wan22-tiny", tmp.file("a.log"));
  autooptim::workers::Client client(run, "test");
  ASSERT_TRUE(wait_for(
      [&] {
        for (const auto& w : client.workers())
          if (w.id == "a" && w.state == "ready") return true;
        return false;
      },
      120))
      << slurp(tmp.file("a.log"));
  // A whole gate run of the baseline: long enough to be killed in the middle of it.
  const json base = json::parse(slurp(small_baseline(tmp)));
  const std::string id = client.submit({{"kind", "gate"},
                                        {"model", "wan22-tiny"},
                                        {"manifest", base},
                                        {"split", "val"},
                                        {"out_dir", tmp.file("gate")},
                                        {"settings",
                                         {{"prompts_dir", kSrc + "/prompts"},
                                          {"manifests_dir", kSrc + "/manifests"},
                                          {"cache_dir", tmp.file("cache")},
                                          {"timing_repeats", 3},
                                          {"max_prompts", 2}}},
                                        {"ledger", tmp.file("ledger.jsonl")}});
  ASSERT_TRUE(wait_for(
      [&] {
        return fs::exists(fs::path(run) / "workers" / "a" / "claimed") &&
               !fs::is_empty(fs::path(run) / "workers" / "a" / "claimed");
      },
      30));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_FALSE(client.poll(id).has_value()) << "the gate finished before the worker could be killed";
  ASSERT_EQ(kill(a, SIGKILL), 0);
  wait_exit(a);
  const pid_t b = spawn("", "worker --serve " + run + " --worker-id b --model wan22-tiny", tmp.file("b.log"));
  const auto r = autooptim::workers::Response::from_json(client.wait(id), "response to " + id);
  autooptim::workers::stop_all(run);
  EXPECT_EQ(wait_exit(b), 0) << slurp(tmp.file("b.log"));
  EXPECT_TRUE(r.ok) << r.to_json().dump();
  EXPECT_EQ(r.worker, "b");
  EXPECT_EQ(r.attempt, 1);
  EXPECT_EQ(r.result.value("manifest", ""), "wan22-tiny/baseline");
  EXPECT_TRUE(fs::exists(fs::path(run) / "workers" / "a" / "dead"));
  EXPECT_TRUE(fs::is_empty(fs::path(run) / "workers" / "a" / "claimed"));
  EXPECT_TRUE(fs::exists(fs::path(tmp.file("gate")) / "verdict.json"));
  // The gate's ledger row was written once, by the worker that finished it.
  EXPECT_EQ(lines(tmp.file("ledger.jsonl")).size(), 1u);
}

TEST(Workers, StagedScreeningDropsWhatCannotReachTheTierWithoutFullClips) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  // No candidate of the tiny model can be 50x faster: every one is screened out by stage timing.
  const auto r =
      sh(tmp, "",
         std::string("run ") + kReduced + " --budget-trials 6 --budget-minutes 4 --screen-min-speedup 50 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  ASSERT_FALSE(rep["candidates"].empty());
  for (const auto& c : rep["candidates"]) {
    EXPECT_TRUE(c.value("screened_out", false)) << c.dump();
    EXPECT_FALSE(c.value("gated", true)) << c.dump();
    ASSERT_TRUE(c.contains("screen")) << c.dump();
    const json& s = c["screen"];
    if (s["estimated_speedup"].is_number()) EXPECT_LT(s["estimated_speedup"].get<double>() * 1.1, 50.0);
    EXPECT_GT(s.value("base_forward_s", 0.0), 0.0);
    EXPECT_GT(c["device_seconds"]["screen_s"].get<double>(), 0.0);
    EXPECT_EQ(c["device_seconds"]["gate_s"].get<double>(), 0.0);
    EXPECT_NE(c.value("not_gated_reason", "").find("screened out"), std::string::npos);
    // No full clip: no gate run folder, no ledger row.
    std::string slug = c.value("id", "");
    for (auto& ch : slug)
      if (ch == '/') ch = '_';
    EXPECT_FALSE(fs::exists(fs::path(out) / "gates" / slug)) << slug;
  }
  for (const auto& row : lines(fs::path(out) / "ledger.jsonl"))
    EXPECT_EQ(json::parse(row).value("manifest", ""), "wan22-tiny/baseline");
  EXPECT_EQ(rep["screening"]["dropped"].get<int>(), static_cast<int>(rep["candidates"].size()));
  EXPECT_EQ(rep["gate_runs"].get<int>(), 1);  // the baseline's only
  // A threshold it can pass: the same kind of candidates are screened and then gated.
  const std::string out2 = tmp.file("run2");
  const auto r2 = sh(
      tmp, "",
      std::string("run ") + kReduced + " --budget-trials 3 --budget-minutes 4 --screen-min-speedup 0.01 --out " + out2);
  ASSERT_EQ(r2.code, 0) << r2.err;
  const json rep2 = json::parse(slurp(fs::path(out2) / "report.json"));
  int gated = 0;
  for (const auto& c : rep2["candidates"])
    if (c.value("gated", false)) {
      ++gated;
      EXPECT_FALSE(c.value("screened_out", true));
      EXPECT_GT(c["device_seconds"]["gate_s"].get<double>(), 0.0);
    }
  EXPECT_GE(gated, 1);
}

TEST(Workers, BaselineVerdictAndClipsAreReusedAcrossRuns) {
  autooptim::test::TempDir tmp;
  const std::string cache = tmp.file("cache");
  const std::string args =
      std::string("run ") + kReduced + " --budget-trials 2 --budget-minutes 4 --baseline-cache " + cache + " --out ";
  const auto r1 = sh(tmp, "", args + tmp.file("run1"));
  ASSERT_EQ(r1.code, 0) << r1.err;
  const json rep1 = json::parse(slurp(fs::path(tmp.file("run1")) / "report.json"));
  EXPECT_FALSE(rep1["baseline"].value("cached", true));
  const auto r2 = sh(tmp, "", args + tmp.file("run2"));
  ASSERT_EQ(r2.code, 0) << r2.err;
  const json rep2 = json::parse(slurp(fs::path(tmp.file("run2")) / "report.json"));
  EXPECT_TRUE(rep2["baseline"].value("cached", false)) << rep2["baseline"].dump();
  EXPECT_EQ(rep2["baseline"]["cache_key"], rep1["baseline"]["cache_key"]);
  EXPECT_EQ(rep2["baseline"]["seconds"], rep1["baseline"]["seconds"]);
  // The first run spent a gate run on the baseline; the second spent its budget on candidates.
  EXPECT_EQ(rep1["gate_runs"].get<int>(), 2);
  EXPECT_EQ(rep2["gate_runs"].get<int>(), 2);
  int gated1 = 0, gated2 = 0;
  for (const auto& c : rep1["candidates"]) gated1 += c.value("gated", false);
  for (const auto& c : rep2["candidates"]) gated2 += c.value("gated", false);
  EXPECT_EQ(gated2, gated1 + 1);
  EXPECT_NE(slurp(fs::path(tmp.file("run2")) / "ledger.jsonl").find("cached_from"), std::string::npos);
  EXPECT_FALSE(rep2["baseline"]["clips"].empty());
  for (const auto& [id, path] : rep2["baseline"]["clips"].items())
    EXPECT_TRUE(fs::exists(fs::path(tmp.file("run2")) / path.get<std::string>()));
}

TEST(Workers, PlanEstimatesTheRunAndRefusesABudgetThatCannotGateOneCandidate) {
  autooptim::test::TempDir tmp;
  const auto ok = sh(tmp, "", std::string("run --plan ") + kReduced + " --budget-minutes 30 --out " + tmp.file("plan"));
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("estimated device time"), std::string::npos) << ok.out;
  EXPECT_EQ(ok.out.find('{'), std::string::npos) << "no raw JSON on the terminal: " << ok.out;
  const json plan = json::parse(slurp(tmp.file("plan") + "/plan.json"));
  EXPECT_TRUE(plan["enough"].get<bool>());
  EXPECT_GT(plan["calibration"]["forward_s"].get<double>(), 0.0);
  EXPECT_GT(plan["calibration"]["decode_s"].get<double>(), 0.0);
  EXPECT_GT(plan["estimate"]["gate_s"].get<double>(), plan["estimate"]["clip_s"].get<double>());
  EXPECT_GT(plan["estimate"]["total_device_s"].get<double>(), 0.0);
  EXPECT_LE(plan["estimate"]["wall_s"].get<double>(), 30 * 60.0 + 1);
  const double min_s = plan["estimate"]["min_budget_s"].get<double>();
  // A budget below the least that gates one candidate is refused, before anything is spent. The second --plan
  // calibrates afresh: a fiftieth of the first's least, not a half, so that a loaded machine's 2x noise on a
  // 5 ms forward cannot make the least fall under it (CI once saw that).
  char minutes[32];
  std::snprintf(minutes, sizeof minutes, "%.7f", min_s / 60.0 / 50);
  const auto refused = sh(tmp, "", std::string("run --plan ") + kReduced + " --budget-minutes " + minutes);
  EXPECT_EQ(refused.code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("cannot gate one candidate"), std::string::npos) << refused.err;
  const auto one_trial = sh(tmp, "", std::string("run --plan ") + kReduced + " --budget-trials 1");
  EXPECT_EQ(one_trial.code, 2);
  EXPECT_NE(one_trial.err.find("--budget-trials 1"), std::string::npos) << one_trial.err;
  // --plan leaves no run behind.
  EXPECT_FALSE(fs::exists(kSrc + "/(plan)"));
}

TEST(Workers, TwoCpuWorkersShareTheGateRunsAndEachLoadsTheModelOnce) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run"), loads = tmp.file("loads.log");
  const auto r = sh(tmp, "AUTOOPTIM_LOAD_LOG=" + loads,
                    std::string("run ") + kReduced + " --workers 2 --budget-trials 6 --budget-minutes 5 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  ASSERT_EQ(rep["workers"].size(), 2u);
  // Two model loads in the whole run (orchestrator and executors load none).
  EXPECT_EQ(lines(loads).size(), 2u) << slurp(loads);
  EXPECT_EQ(rep["memory"]["models_loaded"].get<int>(), 2);
  std::set<std::string> gated_on;
  for (const auto& c : rep["candidates"])
    if (c.value("gated", false)) gated_on.insert(c.value("worker", ""));
  EXPECT_EQ(gated_on, (std::set<std::string>{"cpu0", "cpu1"})) << rep["candidates"].dump();
  for (const auto& w : rep["workers"]) {
    EXPECT_GT(w["requests"].get<int>(), 0) << w.dump();
    EXPECT_GT(w["peak_rss_kb"].get<long>(), 0);
    EXPECT_GE(w["threads"].get<int>(), 1);
    EXPECT_EQ(w["threads"], rep["workers"][0]["threads"]);  // the cores shared out evenly
    // What each worker's timings ran under (runtime/blas_threads.h): the CPU BLAS's thread setting.
    const char* blas_env = std::getenv("OPENBLAS_NUM_THREADS");
    const std::string set_by_us = blas_env && *blas_env
                                      ? std::string("openblas: OPENBLAS_NUM_THREADS=") + blas_env + " kept"
                                      : "openblas: 1 thread (libtorch's threads parallelise)";
    EXPECT_TRUE(w["blas"] == set_by_us || w["blas"] == "no OpenBLAS") << w.dump();
  }
  EXPECT_GT(rep["device_seconds"]["generating_share"].get<double>(), 0.0);
  EXPECT_LE(rep["device_seconds"]["generating_share"].get<double>(), 1.0);
}
