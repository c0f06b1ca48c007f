// The gate's defences beside the checks (untimed work, the baseline's speed) and the verdict from its
// checks, on evidence made in the test.
#include <gtest/gtest.h>

#include "gate_evidence_fixture.h"
#include "gates/gate_baseline_speed.h"
#include "gates/gate_timed_clocks.h"
#include "gates/gate_untimed_work.h"
#include "gates/gate_verdict.h"

namespace autooptim::test {
using namespace autooptim::gates;

namespace {

GateWindow window(const std::string& role, bool candidate_code, double cpu_from, double cpu_s, double foreign_s,
                  int threads, double denoise_s = 0) {
  GateWindow w;
  w.role = role;
  w.candidate_code = candidate_code;
  w.before.process_cpu_s = w.before.own_cpu_s = cpu_from;
  w.after.process_cpu_s = cpu_from + cpu_s + foreign_s;
  w.after.own_cpu_s = cpu_from + cpu_s;
  w.before.threads = w.after.threads = threads;
  w.out.times.denoising = denoise_s;
  w.out.times.denoising_cpu = denoise_s;
  return w;
}

// Warm-ups, one timed pair and the baseline check, 1 CPU second each, nothing foreign, 4 threads throughout.
GateSequence honest_sequence(double baseline_denoise_s = 2.5) {
  GateSequence s;
  s.windows = {window("warmup_baseline", false, 0, 1, 0, 4), window("warmup_candidate", true, 1, 1, 0, 4),
               window("candidate", true, 2, 1, 0, 4),
               window("baseline", false, 3, baseline_denoise_s, 0, 4, baseline_denoise_s),
               window("baseline_check", false, 3 + baseline_denoise_s, baseline_denoise_s, 0, 4, baseline_denoise_s)};
  s.first_candidate = 1;
  s.pair_candidate = {2};
  s.pair_baseline = {3};
  s.baseline_check = 4;
  s.threads_reference = s.harness_threads = 4;
  s.baseline_threads = 4;
  Calibration c;
  c.matmul_tflops = c.attention_tflops = c.matmul_tflops_per_cpu_s = c.attention_tflops_per_cpu_s = 1.0;
  s.baseline_calibrations = {c, c};
  return s;
}

// Two forwards of one TFLOP each at the calibrated 1 TFLOP/s: 2 s of denoising at full efficiency.
GateEvidence speed_evidence(double baseline_denoise_s) {
  GateEvidence ev = honest_evidence(tiny_baseline());
  ev.sequence = honest_sequence(baseline_denoise_s);
  ev.work.base_linear = 1e12;
  ev.work.base_time_embedding = ev.work.base_attention = 0;
  ev.work.base_forwards = 2;
  ev.timing.baseline_denoise_s = baseline_denoise_s;
  return ev;
}

BaselineIdentity tiny_identity() {
  BaselineIdentity id;
  id.model = "wan22-tiny";
  id.baseline_hash = "b";
  id.build = "build-1";
  id.candidate_id = "wan22-tiny/x";
  id.environment = {{"weights_hash", "w"}, {"device", "cpu"}, {"device_name", "cpu"}, {"dtype", "float"}};
  id.config = to_json(official_config("wan22-tiny"));
  id.records_path = "records.json";
  return id;
}

BaselineSpeed judge(const GateEvidence& ev, const std::vector<nlohmann::json>& records = {}) {
  const BaselineIdentity id = tiny_identity();
  return judge_baseline_speed(ev, id, baseline_record_identity(id, 4), records, true, GateSettings{});
}

}  // namespace

TEST(UntimedWork, PassesWhenAllWorkIsInsideTheCandidatesWindows) {
  const UntimedWork u = audit_untimed_work(honest_sequence(), 1.0, GateSettings{});
  EXPECT_TRUE(u.problems.empty()) << u.problems.front();
  EXPECT_EQ(u.report["cpu_s"], 0.0);
  EXPECT_EQ(u.report["threads"]["most_extra"], 0);
}

TEST(UntimedWork, FailsOnForeignCpuInTheBaselinesRunsAndOnLeftoverThreads) {
  GateSequence s = honest_sequence();
  s.windows[3] = window("baseline", false, 3, 2.5, 2.0, 4, 2.5);
  UntimedWork u = audit_untimed_work(s, 1.0, GateSettings{});
  ASSERT_EQ(u.problems.size(), 1u);
  EXPECT_CONTAINS(u.problems[0],
                  "untimed work: 2.000 s of CPU time outside the candidate's timed runs (2.000 s by other "
                  "threads during the baseline's runs");
  s = honest_sequence();
  s.windows[2].after.threads = 6;
  u = audit_untimed_work(s, 1.0, GateSettings{});
  ASSERT_EQ(u.problems.size(), 1u);
  EXPECT_EQ(u.problems[0],
            "the candidate left 2 thread(s) running beyond the harness's own after its runs (4 after the "
            "baseline's warm-up, 6 after 'candidate'): work outside the timed windows");
  s.candidate_threads_flag = 6;  // it asked for two more threads than the baseline's: allowed
  EXPECT_TRUE(audit_untimed_work(s, 1.0, GateSettings{}).problems.empty());
}

// The harness's own work between runs on other threads (the early-stop quality check's parallel PSNR/SSIM) is
// measured around that work and excused; any more than that is still the candidate's.
TEST(UntimedWork, TheHarnessesOwnWorkBetweenRunsIsExcusedAndNothingMore) {
  GateSequence s = honest_sequence();
  for (size_t i : {3u, 4u}) {  // 0.5 s on other threads between the candidate's timed run and the baseline's
    s.windows[i].before.process_cpu_s += 0.5;
    s.windows[i].after.process_cpu_s += 0.5;
  }
  EXPECT_EQ(audit_untimed_work(s, 1.0, GateSettings{}).problems.size(), 1u);
  s.windows[3].harness_foreign_cpu_s = 0.5;
  UntimedWork u = audit_untimed_work(s, 1.0, GateSettings{});
  EXPECT_TRUE(u.problems.empty()) << u.problems.front();
  EXPECT_EQ(u.report["harness_between_runs_cpu_s"], 0.5);
  EXPECT_EQ(u.report["between_runs_cpu_s"], 0.0);
  s.windows[3].harness_foreign_cpu_s = 0.2;  // the harness's work explains only part of it
  u = audit_untimed_work(s, 1.0, GateSettings{});
  ASSERT_EQ(u.problems.size(), 1u);
  EXPECT_CONTAINS(u.problems[0], "0.300 s between runs");
}

// The honest sequence with its wall clock: each window lasts as long as its CPU time on one of two cores,
// and the candidate's timed run claims 40 blocks of 5e9 FLOPs at a calibrated 0.1 TFLOP per CPU second
// (2 s of CPU at that rate, 1 s at twice it: its window spent 1 s).
GateEvidence clock_evidence() {
  GateEvidence ev = honest_evidence(tiny_baseline());
  ev.sequence = honest_sequence();
  ev.sequence.cores = 2;
  double t = 100;
  for (auto& w : ev.sequence.windows) {
    w.before.wall_s = t;
    t += w.after.process_cpu_s - w.before.process_cpu_s;
    w.after.wall_s = t;
  }
  for (auto& c : ev.sequence.baseline_calibrations) c.matmul_tflops_per_cpu_s = 0.1;
  ev.work.num_layers = 2;
  ev.work.candidate_linear = 1e10;
  ev.sequence.windows[2].out.times.step_blocks = std::vector<int64_t>(20, 2);
  return ev;
}

TEST(TimedClocks, PassesRunsWhoseClocksAgreeWithTheirWork) {
  const TimedClocks c = reconcile_timed_clocks(clock_evidence());
  EXPECT_TRUE(c.problems.empty()) << c.problems.front();
  EXPECT_EQ(c.report["cores"], 2);
  EXPECT_EQ(c.report["work_floor"], true);
  EXPECT_DOUBLE_EQ(c.report["windows"][2]["cpu_floor_s"].get<double>(), 1.0);
  EXPECT_EQ(c.report["windows"].size(), 5u);
}

// The hidden red team's warped clock: 1.66 s of CPU in 0.56 s of wall time on 2 cores.
TEST(TimedClocks, FailsMoreCpuTimeThanTheCoresGiveInTheWallTime) {
  GateEvidence ev = clock_evidence();
  GateWindow& w = ev.sequence.windows[2];
  w.after.process_cpu_s = w.before.process_cpu_s + 1.66;
  w.after.wall_s = w.before.wall_s + 0.56;
  const TimedClocks c = reconcile_timed_clocks(ev);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0],
            "'candidate' used 1.660 s of CPU time in 0.560 s of wall time on 2 core(s): more than the cores can "
            "give, the clock that timed it is not the machine's");
  ev.sequence.cores = 4;  // the same window on four cores is possible
  EXPECT_TRUE(reconcile_timed_clocks(ev).problems.empty());
}

// The hidden red team's deferred work: 0.01 s of CPU for a run that claims all its blocks. On a GPU the
// CPU time says nothing about the work (the wall-time floor of the work audit holds there).
TEST(TimedClocks, FailsATimedRunThatSpentLessCpuThanItsClaimedBlocksNeed) {
  GateEvidence ev = clock_evidence();
  GateWindow& w = ev.sequence.windows[2];
  w.after.process_cpu_s = w.before.process_cpu_s + 0.01;
  w.after.own_cpu_s = w.before.own_cpu_s + 0.01;
  const TimedClocks c = reconcile_timed_clocks(ev);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_EQ(c.problems[0],
            "'candidate' claims 40 transformer blocks, whose GEMMs need 1.000 s of CPU time at twice the "
            "calibrated rate, but the process spent 0.010 s in its window: the work was done outside it");
  ev.on_cuda = true;
  EXPECT_TRUE(reconcile_timed_clocks(ev).problems.empty());
}

TEST(BaselineSpeed, TrustsABaselineAtTheMachinesThroughput) {
  const BaselineSpeed s = judge(speed_evidence(2.5));
  EXPECT_TRUE(s.problem.empty()) << s.problem;
  EXPECT_TRUE(s.trusted);
  EXPECT_DOUBLE_EQ(s.report["efficiency"].get<double>(), 0.8);
  EXPECT_EQ(s.report["floor"], 0.05);
  EXPECT_EQ(s.entry["build"], "build-1");
  EXPECT_EQ(s.key.size(), 24u);
}

TEST(BaselineSpeed, RefusesABaselineBelowTheEfficiencyFloor) {
  const BaselineSpeed s = judge(speed_evidence(100.0));
  EXPECT_FALSE(s.trusted);
  EXPECT_CONTAINS(s.problem, "the baseline's efficiency is 0.0200 of the throughput calibrated next to its runs");
  EXPECT_CONTAINS(s.problem, "below the floor 0.0500");
}

TEST(BaselineSpeed, RefusesABaselineSlowerThanItsRecords) {
  const nlohmann::json record = {
      {"build", "build-1"}, {"efficiency", {{"wall", 0.8}, {"cpu", 0.8}}}, {"noise", {{"wall", 0.0}, {"cpu", 0.0}}}};
  EXPECT_TRUE(judge(speed_evidence(2.5), {record}).problem.empty());
  const BaselineSpeed s = judge(speed_evidence(8.0), {record});
  EXPECT_FALSE(s.trusted);
  EXPECT_CONTAINS(s.problem,
                  "the baseline is slower than the records of this build allow (wall clock: efficiency 0.2500 "
                  "against 0.8000 recorded, 220% slower");
}

// Issue 38: a slowdown that one clock shows is enough (before, every clock had to agree, and the CPU
// clock, measured over the whole run, diluted a slowdown of the denoising alone).
TEST(BaselineSpeed, RefusesABaselineThatOneClockShowsSlower) {
  const nlohmann::json record = {
      {"build", "build-1"}, {"efficiency", {{"wall", 0.8}, {"cpu", 0.8}}}, {"noise", {{"wall", 0.0}, {"cpu", 0.0}}}};
  GateEvidence ev = speed_evidence(8.0);
  for (size_t k : {size_t{3}, size_t{4}}) ev.sequence.windows[k].out.times.denoising_cpu = 2.5;  // CPU clock fine
  const BaselineSpeed s = judge(ev, {record});
  EXPECT_FALSE(s.trusted);
  EXPECT_CONTAINS(s.problem, "wall clock: efficiency 0.2500 against 0.8000 recorded, 220% slower");
  EXPECT_CONTAINS(s.problem, "cpu clock: efficiency 0.8000 against 0.8000 recorded, 0% slower");
}

// A baseline slower than its records within their tolerance is not refused, but it does not join them
// either: the records cannot be walked down a tolerance at a time.
TEST(BaselineSpeed, AToleratedSlowerBaselineIsNotRecorded) {
  std::vector<nlohmann::json> records(
      6,
      {{"build", "build-1"}, {"efficiency", {{"wall", 0.8}, {"cpu", 0.8}}}, {"noise", {{"wall", 0.0}, {"cpu", 0.0}}}});
  const BaselineSpeed same = judge(speed_evidence(2.5), records);
  EXPECT_TRUE(same.problem.empty()) << same.problem;
  EXPECT_TRUE(same.trusted);
  const BaselineSpeed slower = judge(speed_evidence(3.2), records);  // efficiency 0.625: 28% slower, tolerance 40%
  EXPECT_TRUE(slower.problem.empty()) << slower.problem;
  EXPECT_FALSE(slower.trusted);
  EXPECT_EQ(slower.report["records"]["below_record_band"], true);
}

TEST(GateVerdictDecision, NamesTheFirstFailingCheckInSignatureOrder) {
  GateVerdict v;
  v.checks = {{"performance", true, ""}, {"quality", true, ""}};
  decide_verdict(v);
  EXPECT_TRUE(v.accepted);
  EXPECT_EQ(v.failure_signature, "");
  v.checks = {{"performance", false, ""}, {"quality", false, ""}};
  decide_verdict(v);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.failure_signature, "quality-cliff");
  GateVerdict semantic;
  semantic.checks = {{"visual", false, "", {{"new_artifacts", nlohmann::json::array()}}}};
  decide_verdict(semantic);
  EXPECT_EQ(semantic.failure_signature, "semantic-loss");
}

}  // namespace autooptim::test
