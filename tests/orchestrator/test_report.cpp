// The run's report and exit status from a report object: what an engineer choosing a tier and a CI job
// read. A synthetic report of every kind of candidate (accepted lossless, rejected lossy, never gated,
// could not run) and executor (finished, failed) goes through judge_run and the three renderers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "orchestrator/orchestrator.h"
#include "orchestrator/report.h"
#include "test_util.h"

using nlohmann::json;
namespace orch = autooptim::orchestrator;

namespace {

json timing(double median) {
  return {{"median_s", median},
          {"min_s", median * 0.97},
          {"max_s", median * 1.04},
          {"spread", 0.07},
          {"runs_s", {median, median * 0.97, median * 1.04}}};
}

json report() {
  json r = {
      {"schema_version", 2},
      {"model", "wan22-tiny"},
      {"weights", "synthetic"},
      {"device", "cpu"},
      {"device_name", "test cpu"},
      {"build", "0123456789abcdef0123"},
      {"official_config", true},
      {"config", json::object()},
      {"split", "val"},
      {"heldout_split", "heldout16"},
      {"gate_runs", 4},
      {"baseline",
       {{"manifest", "wan22-tiny/baseline"},
        {"seconds", 2.5},
        {"gate_run", "gates/wan22-tiny_baseline/val"},
        {"timing", timing(2.5)},
        {"clips", {{"mh-01", "gates/wan22-tiny_baseline/val/videos/mh-01.mp4"}}}}},
      {"tiers", {{"1.5x", nullptr}, {"2x", nullptr}, {"3x", nullptr}, {"4x", nullptr}}},
      {"tier_notes",
       {{"1.5x", {"nearest miss: wan22-tiny/cache/easycache-t0.12 at 2.10x, worst PSNR 16.40 dB, failed quality"}},
        {"2x", json::array()},
        {"3x", json::array()},
        {"4x", json::array()}}},
      {"executors",
       {{{"family", "kernel"},
         {"state", "finished"},
         {"reason", "finished its search"},
         {"log", "outbox/kernel.log"},
         {"explored",
          {{"trials", {{{"label", "all"}, {"speedup", 1.1}, {"psnr", 100.0}, {"prompts", 2}, {"engaged", true}}}},
           {"proposed", {"greedy"}}}}},
        {{"family", "cache"},
         {"state", "finished"},
         {"reason", ""},
         {"log", "outbox/cache.log"},
         {"explored",
          {{"trials",
            {{{"label", "threshold 0.05"}, {"speedup", 1.8}, {"psnr", 17.0}, {"prompts", 1}, {"engaged", true}},
             {{"label", "threshold 0.12"}, {"speedup", 2.4}, {"psnr", 15.0}, {"prompts", 1}, {"engaged", true}}}},
           {"proposed", {"easycache-t0.12"}}}}},
        {{"family", "sparse"},
         {"state", "failed"},
         {"reason", "exit 2, see outbox/sparse.log: autooptim: error: boom"},
         {"log", "outbox/sparse.log"},
         {"explored", {{"trials", json::array()}, {"proposed", json::array()}}}}}},
      {"prompt_categories", {{"mh-01", "motion"}, {"tx-02", "text"}}},
      {"prompt_texts", {{"mh-01", "a red fox runs left"}}},
      {"device_seconds",
       {{"devices", 1}, {"total_s", 200.0}, {"gating_s", 120.0}, {"exploration_s", 70.0}, {"kind", "CPU"}}},
      {"environment",
       {{"timestamp", "2026-12-03T09:00:00.000Z"},
        {"finished", "2026-12-03T09:03:20.000Z"},
        {"command_line", "autooptim run --model wan22-tiny --out x"},
        {"thresholds", {{"min_psnr_db", 30.0}, {"min_ssim", 0.9}}},
        {"build",
         {{"version", "0.1.0"},
          {"commit", "abc123def456"},
          {"flavour", "CPU"},
          {"build_type", "Release"},
          {"libtorch", "1.13.0"},
          {"cuda", "none"},
          {"cudnn", "none"},
          {"driver", "none"}}}}},
      {"candidates", json::array()}};
  // Accepted, lossless: bit-identical output.
  r["candidates"].push_back(
      {{"id", "wan22-tiny/kernel/greedy"},
       {"family", "kernel"},
       {"speedup", 1.12},
       {"psnr", 100.0},
       {"ssim", 1.0},
       {"accepted", true},
       {"gated", true},
       {"lossless", true},
       {"failure_signature", ""},
       {"verdicts",
        {{"performance", {{"pass", true}, {"reason", "1.12x faster"}}},
         {"quality", {{"pass", true}, {"reason", "identical"}}}}},
       {"baseline_timing", timing(2.4)},
       {"candidate_timing", timing(2.14)},
       {"quality_by_prompt",
        {{"mh-01", {{"psnr", 100.0}, {"ssim", 1.0}}}, {"tx-02", {{"psnr", 100.0}, {"ssim", 1.0}}}}},
       {"clips", {{"mh-01", "gates/wan22-tiny_kernel_greedy/val/videos/mh-01.mp4"}}},
       {"heldout",
        {{"accepted", true},
         {"speedup", 1.1},
         {"psnr", 100.0},
         {"ssim", 1.0},
         {"failure_signature", ""},
         {"quality_by_prompt", {{"ho-07", {{"psnr", 100.0}}}, {"ho-11", {{"psnr", 100.0}}}}}}}});
  // Rejected by the quality gate: the gate did its job.
  r["candidates"].push_back(
      {{"id", "wan22-tiny/cache/easycache-t0.12"},
       {"family", "cache"},
       {"speedup", 2.1},
       {"psnr", 16.4},
       {"ssim", 0.61},
       {"accepted", false},
       {"gated", true},
       {"lossless", false},
       {"failure_signature", "quality-cliff"},
       {"verdicts",
        {{"performance", {{"pass", true}, {"reason", "2.1x faster"}}},
         {"quality", {{"pass", false}, {"reason", "quality below tolerance: worst PSNR 16.4 dB (needs 30)"}}}}},
       {"quality_by_prompt",
        {{"mh-01", {{"psnr", 16.4}, {"ssim", 0.6}}}, {"tx-02", {{"psnr", 22.0}, {"ssim", 0.7}}}}}});
  // Never gated: the budget was spent first.
  r["candidates"].push_back({{"id", "wan22-tiny/composite/greedy-plus-easycache-t0.05"},
                             {"family", "composite"},
                             {"speedup", 0.0},
                             {"psnr", 0.0},
                             {"ssim", 0.0},
                             {"accepted", false},
                             {"gated", false},
                             {"lossless", false},
                             {"failure_signature", ""},
                             {"verdicts", json::object()},
                             {"not_gated_reason", "gate-run budget spent (4 of --budget-trials)"}});
  // Could not run.
  r["candidates"].push_back(
      {{"id", "wan22-tiny/sparse/st-ds1"},
       {"family", "sparse"},
       {"speedup", 0.0},
       {"psnr", 0.0},
       {"ssim", 0.0},
       {"accepted", false},
       {"gated", true},
       {"lossless", false},
       {"failure_signature", "could-not-run"},
       {"verdicts",
        {{"artifacts", {{"pass", false}, {"reason", "the manifest's flags cannot run: sparse needs 2 frames"}}}}}});
  return r;
}

json with_outcome(json r, const std::string& fail_if_no_tier = "") {
  const auto o = orch::judge_run(r, fail_if_no_tier);
  r["outcome"] = {{"exit_code", o.exit_code},
                  {"problems", o.problems},
                  {"warnings", o.warnings},
                  {"fail_if_no_tier", fail_if_no_tier}};
  return r;
}

// The <testcase> element of a suite/case in a JUnit document ("" when absent).
std::string junit_case(const std::string& xml, const std::string& suite, const std::string& name) {
  const std::string open = "<testcase classname='" + suite + "' name='" + name + "'>";
  const auto at = xml.find(open);
  if (at == std::string::npos) return "";
  return xml.substr(at, xml.find("</testcase>", at) - at);
}

}  // namespace

TEST(RunOutcome, HealthyRunWithOneFailedExecutorIsZeroWithAWarning) {
  const auto o = orch::judge_run(report(), "");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_TRUE(o.problems.empty());
  ASSERT_EQ(o.warnings.size(), 1u);
  EXPECT_NE(o.warnings[0].find("sparse"), std::string::npos) << o.warnings[0];
}

TEST(RunOutcome, EveryExecutorFailedIsExitTwoWithTheReasons) {
  json r = report();
  for (auto& e : r["executors"])
    e["state"] = "failed", e["reason"] = "exit 2, see outbox/" + e["family"].get<std::string>() + ".log: bad";
  const auto o = orch::judge_run(r, "");
  EXPECT_EQ(o.exit_code, 2);
  ASSERT_FALSE(o.problems.empty());
  EXPECT_NE(o.problems[0].find("every executor failed"), std::string::npos) << o.problems[0];
  EXPECT_NE(o.problems[0].find("outbox/cache.log"), std::string::npos) << o.problems[0];
}

TEST(RunOutcome, NothingGatedOrNoCandidateOrNoBaselineIsExitTwo) {
  json r = report();
  for (auto& c : r["candidates"]) c["gated"] = false;
  auto o = orch::judge_run(r, "");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.problems.at(0).find("none of the 4 candidates was gated"), std::string::npos) << o.problems[0];

  r = report();
  r["candidates"] = json::array();
  o = orch::judge_run(r, "");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.problems.at(0).find("proposed nothing"), std::string::npos);

  r = report();
  r["baseline"]["seconds"] = 0.0;
  r["baseline"]["reason"] = "time budget spent";
  o = orch::judge_run(r, "");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.problems.at(0).find("baseline was not measured: time budget spent"), std::string::npos) << o.problems[0];
}

TEST(RunOutcome, FailIfNoTierIsExitOneWithTheNearestMiss) {
  auto o = orch::judge_run(report(), "any");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.problems.at(0).find("no tier was reached"), std::string::npos);
  EXPECT_NE(o.problems.at(0).find("nearest miss"), std::string::npos) << o.problems[0];
  json r = report();
  r["tiers"]["1.5x"] = {{"manifest", "x"}, {"speedup", 1.6}, {"psnr", 40.0}, {"ssim", 0.99}};
  EXPECT_EQ(orch::judge_run(r, "any").exit_code, 0);
  EXPECT_EQ(orch::judge_run(r, "1.5x").exit_code, 0);
  o = orch::judge_run(r, "2x");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.problems.at(0).find("2x"), std::string::npos);
}

TEST(RunOutcome, InterruptedIs128PlusTheSignal) {
  json r = report();
  r["interrupted"] = {{"signal", 15}, {"name", "SIGTERM"}};
  const auto o = orch::judge_run(r, "any");
  EXPECT_EQ(o.exit_code, 143);
  EXPECT_NE(o.problems.at(0).find("--resume"), std::string::npos);
}

TEST(Report, LosslessIsIdenticalNeverOneHundredDecibels) {
  const json r = with_outcome(report());
  for (const std::string& doc : {orch::render_markdown(r), orch::render_html(r)}) {
    EXPECT_EQ(doc.find("100.00 dB"), std::string::npos);
    EXPECT_EQ(doc.find("100.00"), std::string::npos);
    EXPECT_NE(doc.find("identical"), std::string::npos);
  }
  EXPECT_EQ(orch::quality_text(100.0, true), "identical");
  EXPECT_EQ(orch::quality_text(31.234, true), "31.23 dB");
  EXPECT_EQ(orch::quality_text(0.0, false), "-");
}

TEST(Report, NeverGatedAndCouldNotRunAreSaidWithTheirReasons) {
  const json r = with_outcome(report());
  const std::string mdoc = orch::render_markdown(r), html = orch::render_html(r);
  for (const std::string& doc : {mdoc, html}) {
    EXPECT_NE(doc.find("NEVER GATED"), std::string::npos);
    EXPECT_NE(doc.find("gate-run budget spent (4 of --budget-trials)"), std::string::npos);
    EXPECT_NE(doc.find("COULD NOT RUN"), std::string::npos);
    EXPECT_EQ(doc.find("rejected 0.00x"), std::string::npos);
  }
  // Never gated: a dash, not 0.00x / 0.00 dB, in its table row.
  const auto row = mdoc.substr(mdoc.find("| `wan22-tiny/composite/greedy-plus-easycache-t0.05`"));
  EXPECT_EQ(row.substr(0, row.find('\n')).find("0.00"), std::string::npos) << row.substr(0, row.find('\n'));
}

TEST(Report, GateReasonsAreTextAndVerdictsAreWords) {
  const json r = with_outcome(report());
  const std::string html = orch::render_html(r);
  // The failed gate's reason is in the page's text, not only in a title attribute, next to a word.
  EXPECT_NE(html.find("FAIL</span> quality: quality below tolerance: worst PSNR 16.4 dB (needs 30)</li>"),
            std::string::npos);
  EXPECT_NE(html.find("<strong>REJECTED</strong>"), std::string::npos);
  EXPECT_NE(html.find("<strong>ACCEPTED</strong>"), std::string::npos);
  const std::string mdoc = orch::render_markdown(r);
  EXPECT_NE(mdoc.find("quality: quality below tolerance"), std::string::npos);
}

TEST(Report, PlotHasLabelsTheQualityFloorAndTierLines) {
  const std::string html = orch::render_html(with_outcome(report()));
  EXPECT_NE(html.find("quality floor 30 dB"), std::string::npos);
  for (const char* t : {"tier 1.5x", "tier 2x", "tier 3x", "tier 4x"}) EXPECT_NE(html.find(t), std::string::npos) << t;
  // Point labels: the candidates' numbers in the plot, and the never-gated one not plotted.
  const std::string svg = html.substr(html.find("<svg"), html.find("</svg>") - html.find("<svg"));
  EXPECT_NE(svg.find(">1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">3</text>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(Report, SaysWhyNoTierAndWhatEachExecutorExplored) {
  const json r = with_outcome(report());
  for (const std::string& doc : {orch::render_markdown(r), orch::render_html(r)}) {
    EXPECT_NE(doc.find("none reached"), std::string::npos);
    EXPECT_NE(doc.find("nearest miss: wan22-tiny/cache/easycache-t0.12 at 2.10x"), std::string::npos);
    // The cache executor's sweep, visible only in its outbox before.
    EXPECT_NE(doc.find("2 trials reached 1.80-2.40x at 15.00 dB to 17.00 dB"), std::string::npos);
    EXPECT_NE(doc.find("sparse: failed"), std::string::npos);
  }
}

TEST(Report, TimesSpreadCategoriesHeldOutClipsAndEnvironment) {
  const json r = with_outcome(report());
  const std::string mdoc = orch::render_markdown(r), html = orch::render_html(r);
  for (const std::string& doc : {mdoc, html}) {
    // Absolute seconds with the spread, for the header's baseline and each candidate's own.
    EXPECT_NE(doc.find("2.500 s (2.425-2.600, spread 7.0%, 3 runs)"), std::string::npos);
    EXPECT_NE(doc.find("2.140 s ("), std::string::npos);
    EXPECT_NE(doc.find("gates/wan22-tiny_baseline/val"),
              std::string::npos);                      // which gate run the header's baseline is from
    EXPECT_NE(doc.find("motion"), std::string::npos);  // per-category quality
    EXPECT_NE(doc.find("Held-out"), std::string::npos);
    EXPECT_NE(doc.find("abc123def456"), std::string::npos);  // commit
    EXPECT_NE(doc.find("1.13.0"), std::string::npos);        // libtorch
    EXPECT_NE(doc.find("autooptim run --model wan22-tiny --out x"), std::string::npos);
    EXPECT_NE(doc.find("2026-12-03T09:00:00.000Z"), std::string::npos);
    EXPECT_NE(doc.find("CPU-seconds: 200"), std::string::npos);
  }
  EXPECT_NE(mdoc.find("report schema version 2"), std::string::npos);
  EXPECT_NE(mdoc.find("motion identical; text identical"), std::string::npos) << mdoc;
  // Held-out quality per prompt, in both.
  for (const std::string& doc : {mdoc, html}) EXPECT_NE(doc.find("ho-11"), std::string::npos);
  EXPECT_NE(mdoc.find("per prompt: ho-07 identical ho-11 identical"), std::string::npos) << mdoc;
  // Clips: baseline next to the candidate, as links in the markdown.
  EXPECT_NE(
      mdoc.find("| mh-01 | "
                "[gates/wan22-tiny_baseline/val/videos/mh-01.mp4](gates/wan22-tiny_baseline/val/videos/mh-01.mp4) | "
                "[gates/wan22-tiny_kernel_greedy/val/videos/mh-01.mp4](gates/wan22-tiny_kernel_greedy/val/videos/"
                "mh-01.mp4) |"),
      std::string::npos)
      << mdoc;
  // In the page: the baseline once per prompt with the prompt's words, each accepted candidate beside it.
  EXPECT_NE(html.find("<video controls muted loop width='320' src='gates/wan22-tiny_baseline/val/videos/mh-01.mp4'>"),
            std::string::npos);
  EXPECT_NE(
      html.find("<video controls muted loop width='320' src='gates/wan22-tiny_kernel_greedy/val/videos/mh-01.mp4'>"),
      std::string::npos);
  EXPECT_NE(html.find("a red fox runs left"), std::string::npos);
  size_t baseline_videos = 0;
  for (size_t at = html.find("wan22-tiny_baseline/val/videos/mh-01.mp4'>"); at != std::string::npos;
       at = html.find("wan22-tiny_baseline/val/videos/mh-01.mp4'>", at + 1))
    ++baseline_videos;
  EXPECT_EQ(baseline_videos, 1u);
}

// report.html written to disk embeds its (small) clips, so the page stays whole when copied elsewhere.
TEST(Report, WrittenPageEmbedsItsClips) {
  autooptim::test::TempDir tmp;
  std::filesystem::create_directories(tmp.path() / "gates/wan22-tiny_baseline/val/videos");
  std::ofstream(tmp.file("gates/wan22-tiny_baseline/val/videos/mh-01.mp4"), std::ios::binary) << "abc";
  orch::write_reports(tmp.path().string(), with_outcome(report()));
  std::ifstream in(tmp.file("report.html"));
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("src='data:video/mp4;base64,YWJj'"), std::string::npos);
  // A clip that is not there stays a link.
  EXPECT_NE(html.find("src='gates/wan22-tiny_kernel_greedy/val/videos/mh-01.mp4'"), std::string::npos);
}

TEST(Junit, ARejectionIsAPassedCheckAndProblemsAreFailuresOrErrors) {
  const std::string xml = orch::render_junit(with_outcome(report(), "any"));
  // The quality gate rejected a lossy candidate: the gate worked, the testcase passes with the reason.
  const std::string q = junit_case(xml, "wan22-tiny/cache/easycache-t0.12", "quality");
  ASSERT_FALSE(q.empty()) << xml;
  EXPECT_EQ(q.find("<failure"), std::string::npos) << q;
  EXPECT_NE(q.find("rejected: quality below tolerance"), std::string::npos) << q;
  // Never gated is skipped with the reason (the budget went to candidates ranked above it: not a failure of
  // the product); could not run is an error with its message.
  EXPECT_NE(junit_case(xml, "wan22-tiny/composite/greedy-plus-easycache-t0.05", "gated")
                .find("<skipped message='never gated: gate-run budget spent (4 of --budget-trials)'/>"),
            std::string::npos);
  EXPECT_NE(junit_case(xml, "wan22-tiny/sparse/st-ds1", "gated").find("<error message='could not run: artifacts: "),
            std::string::npos);
  // The failed executor: an error naming its log.
  EXPECT_NE(
      junit_case(xml, "executors", "sparse").find("<error message='executor failed: exit 2, see outbox/sparse.log"),
      std::string::npos);
  EXPECT_EQ(junit_case(xml, "executors", "kernel").find("<error"), std::string::npos);
  // No tier reached: a failure with the nearest miss; the outcome (exit 1) a failure too.
  EXPECT_NE(junit_case(xml, "tiers", "any tier reached").find("<failure message='no tier reached: nearest miss"),
            std::string::npos);
  EXPECT_NE(junit_case(xml, "run", "outcome").find("<failure message='exit 1: --fail-if-no-tier"), std::string::npos);
  // Counts add up.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(xml, m, std::regex("<testsuites [^>]*failures='(\\d+)' errors='(\\d+)'")));
  EXPECT_EQ(std::stoi(m[1]), 2);
  EXPECT_EQ(std::stoi(m[2]), 2);
}

TEST(Junit, ABucketAskedForIsAFailureTheOthersSkipped) {
  json r = report();
  r["tiers"]["1.5x"] = {{"manifest", "wan22-tiny/kernel/greedy"}, {"speedup", 1.6}, {"psnr", 100.0}, {"ssim", 1.0}};
  const std::string xml = orch::render_junit(with_outcome(r, "2x"));
  EXPECT_EQ(junit_case(xml, "tiers", "1.5x").find("<failure"), std::string::npos);
  EXPECT_EQ(junit_case(xml, "tiers", "any tier reached").find("<failure"), std::string::npos);
  EXPECT_NE(junit_case(xml, "tiers", "2x").find("<failure message='no tier reached for 2x"), std::string::npos);
  EXPECT_NE(junit_case(xml, "tiers", "3x").find("<skipped"), std::string::npos);
}

// The tier table: one row per manifest (the buckets it won together), the prompts each figure rests on, the
// margin above the quality floor (flagged when thin), the deploy check, and a rollback that names only the
// switches the tier turns on.
TEST(Report, TierRowsSayPromptsMarginDeployAndRollback) {
  json r = report();
  const json tier = {{"manifest", "wan22-tiny/composite/greedy-plus-easycache"},
                     {"speedup", 3.0},
                     {"psnr", 30.74},
                     {"ssim", 0.97},
                     {"heldout_accepted", true},
                     {"heldout_speedup", 2.9},
                     {"heldout_psnr", 31.2},
                     {"switches", {"easycache.enabled", "text_trim"}},
                     {"lossless", false},
                     {"psnr_floor", 30.0},
                     {"prompts", 2},
                     {"split_prompts", 8},
                     {"heldout_prompts", 16},
                     {"heldout_split_prompts", 16},
                     {"deploy", {{"ran", true}, {"reproduced", true}, {"bit_exact", true}, {"speedup", 2.93}}}};
  r["tiers"]["1.5x"] = r["tiers"]["2x"] = r["tiers"]["3x"] = tier;
  r = with_outcome(r);
  const std::string mdoc = orch::render_markdown(r), html = orch::render_html(r);
  EXPECT_NE(mdoc.find("| 1.5x, 2x, 3x | `wan22-tiny/composite/greedy-plus-easycache` | 3.00x on 2 of 8 val prompts | "
                      "30.74 dB (floor 30.00 dB, margin 0.74 dB: THIN MARGIN) | accepted, 2.90x, 31.20 dB on 16 of 16 "
                      "heldout16 prompts | "
                      "reproduced 2.93x, bit-exact: yes | turn off easycache.enabled, text_trim |"),
            std::string::npos)
      << mdoc;
  EXPECT_NE(mdoc.find("**4x: none reached.**"), std::string::npos) << mdoc;
  EXPECT_EQ(html.find("unset {"), std::string::npos);
  EXPECT_NE(html.find("<td>1.5x, 2x, 3x</td>"), std::string::npos);
  EXPECT_NE(html.find("reproduced 2.93x, bit-exact: yes"), std::string::npos);
  // A deploy check that did not reproduce, or did not run, says so.
  r["tiers"]["1.5x"]["deploy"] = {{"ran", false}, {"not_run", "--no-deploy-check"}};
  EXPECT_NE(orch::render_markdown(r).find("not checked: --no-deploy-check"), std::string::npos);
}
