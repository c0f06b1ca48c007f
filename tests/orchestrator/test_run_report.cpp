// The report phase's inputs: the baseline block and each candidate's entry, from a state made here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "orchestrator/phases/phases.h"
#include "run_state_fixture.h"

using namespace autooptim;
using namespace autooptim::orchestrator;
using nlohmann::json;
using orchestrator::testing::candidate;
using orchestrator::testing::record;
using orchestrator::testing::RunStateTest;
using orchestrator::testing::verdict;
namespace fs = std::filesystem;

TEST_F(RunStateTest, AnUngatedCandidateSaysWhyWithItsScreenAndDeviceTime) {
  auto& s = state();
  const Candidate c = candidate(s.base, "kernel", "k", {{"cross_kv_cache", true}}, nullptr);
  s.not_gated[{c.hash, req_.split}] = "screened out by stage timing";
  s.screen_of[c.hash] = {{"estimated_speedup", 1.1}, {"dropped", true}};
  s.device_s_of[c.hash] = {2.0, 0.0};
  const json e = candidate_entry(s, c);
  EXPECT_EQ(e["gated"], false);
  EXPECT_EQ(e["not_gated_reason"], "screened out by stage timing");
  EXPECT_EQ(e["screened_out"], true);
  EXPECT_EQ(e["device_seconds"], json({{"screen_s", 2.0}, {"gate_s", 0.0}, {"total_s", 2.0}}));
  EXPECT_FALSE(e.contains("gate_run"));
  EXPECT_FALSE(e.contains("heldout"));
  EXPECT_EQ(e["verdicts"], json::object());
  const Candidate other = candidate(s.base, "kernel", "q", {{"fused_qkv", true}}, nullptr);
  EXPECT_EQ(candidate_entry(s, other)["not_gated_reason"], "not gated");
  EXPECT_EQ(candidate_entry(s, other)["screened_out"], false);
  EXPECT_FALSE(candidate_entry(s, other).contains("device_seconds"));
}

TEST_F(RunStateTest, AGatedCandidateListsItsVerdictsTimingQualityAndClips) {
  auto& s = state();
  json v = verdict(false, 1.7, 31, "quality");
  v["gates"]["performance"] = {{"pass", true},
                               {"details", {{"baseline", {{"median", 2.0}}}, {"candidate", {{"median", 1.2}}}}}};
  v["baseline_seconds"] = 2.0;
  v["candidate_seconds"] = 1.2;
  v["worker"] = "cpu0";
  v["failure_signature"] = "quality";
  const Candidate c = candidate(s.base, "cache", "e", {{"easycache", {{"enabled", true}}}}, v);
  const fs::path dir = s.out / "gates" / "wan22-tiny_cache_e" / req_.split;
  fs::create_directories(dir / "videos");
  std::ofstream(dir / "videos" / "mh-01-42.mp4") << "x";
  std::ofstream(dir / "quality.json") << json{{"clips",
                                               {{"mh-01", {{"psnr_mean", 31.0}, {"ssim_mean", 0.8}}},
                                                {"pair0:mh-01@7", {{"psnr_mean", 1.0}}}}}}
                                             .dump();
  const json e = candidate_entry(s, c);
  EXPECT_EQ(e["gated"], true);
  EXPECT_EQ(e["accepted"], false);
  EXPECT_EQ(e["failure_signature"], "quality");
  EXPECT_EQ(e["verdicts"]["quality"], json({{"pass", false}, {"reason", "quality failed"}}));
  EXPECT_EQ(e["verdicts"].size(), 4u);
  EXPECT_EQ(e["baseline_timing"], json({{"median", 2.0}}));
  EXPECT_EQ(e["candidate_timing"], json({{"median", 1.2}}));
  EXPECT_EQ(e["gate_run"], "gates/wan22-tiny_cache_e/val");
  EXPECT_EQ(e["worker"], "cpu0");
  EXPECT_EQ(e["quality_by_prompt"], json({{"mh-01", {{"psnr", 31.0}, {"ssim", 0.8}}}}));  // timed pairs left out
  EXPECT_EQ(e["clips"], json({{"mh-01-42", "gates/wan22-tiny_cache_e/val/videos/mh-01-42.mp4"}}));
}

// An accepted candidate whose held-out check did not run says why; one checked carries its held-out verdict.
TEST_F(RunStateTest, AnAcceptedCandidatesHeldOutCheckIsReported) {
  auto& s = state();
  Candidate c = candidate(s.base, "kernel", "k", {{"cross_kv_cache", true}}, verdict(true, 1.6, 40));
  s.not_gated[{c.hash, req_.heldout_split}] = "gate-run budget spent (40 of --budget-trials)";
  EXPECT_EQ(candidate_entry(s, c)["heldout"],
            json({{"gated", false}, {"reason", "gate-run budget spent (40 of --budget-trials)"}}));
  c.heldout = record(true, 1.55, 39);
  const json h = candidate_entry(s, c)["heldout"];
  EXPECT_EQ(h["accepted"], true);
  EXPECT_DOUBLE_EQ(h["speedup"].get<double>(), 1.55);
  EXPECT_EQ(h["quality_by_prompt"], json::object());
}

TEST_F(RunStateTest, TheBaselineBlockSaysWhyItWasNotMeasuredOrWhereItCameFrom) {
  auto& s = state();
  s.not_gated[{gates::manifest_hash(s.base), req_.split}] = "interrupted by SIGINT before its gate run";
  EXPECT_EQ(baseline_entry(s), json({{"manifest", "wan22-tiny/baseline"},
                                     {"seconds", 0.0},
                                     {"gate_run", "gates/wan22-tiny_baseline/val"},
                                     {"reason", "interrupted by SIGINT before its gate run"}}));
  json v = verdict(true, 1.0, 99, "", gates::manifest_hash(s.base));
  v["baseline_seconds"] = 3.5;
  v["cached_from"] = "/cache/baselines/abc";
  s.base_verdict = GateRecord::read(v, "test verdict");
  s.base_seconds = 3.5;
  s.baseline_key = "abc";
  const json b = baseline_entry(s);
  EXPECT_EQ(b["cached"], true);
  EXPECT_EQ(b["cached_from"], "/cache/baselines/abc");
  EXPECT_EQ(b["cache_key"], "abc");
  EXPECT_EQ(b["clips"], json::object());
  EXPECT_FALSE(b.contains("reason"));
}

// The whole report of a state with no worker: what judge_run reads is there.
TEST_F(RunStateTest, TheReportCarriesTheCountsJudgeRunReads) {
  auto& s = state();
  s.cands = {candidate(s.base, "kernel", "k", {{"cross_kv_cache", true}}, nullptr)};
  s.not_gated[{s.cands[0].hash, req_.split}] = "time budget spent (--budget-minutes 600.00)";
  s.gate_runs = 1;
  s.gate_phase = {12.5, 1};
  const json r = build_report(s, WorkerTotals{});
  EXPECT_EQ(r["schema_version"], 2);
  EXPECT_EQ(r["gate_runs"], 1);
  EXPECT_EQ(r["phases"]["gate"], json({{"wall_s", 12.5}, {"gate_runs", 1}}));
  EXPECT_EQ(r["budget_note"], "time budget spent (--budget-minutes 600.00)");
  EXPECT_EQ(r["candidates"].size(), 1u);
  EXPECT_FALSE(r.contains("interrupted"));
  const RunOutcome o = judge_run(r, "");
  EXPECT_EQ(o.exit_code, 2);  // the baseline was not measured, nothing was gated
  ASSERT_EQ(o.problems.size(), 2u);
  EXPECT_EQ(o.problems[1], "none of the 1 candidates was gated (time budget spent (--budget-minutes 600.00))");
}
