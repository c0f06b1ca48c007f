// autooptim compare: the nightly sweep's regression check between two runs' reports. Report files are
// written by the test in the layout `run` writes (schema 2: tiers, candidates with their timing summaries),
// then compared in-process and through the binary: exit 0 within the recorded noise, 1 beyond it, 2 on bad
// input with one message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include "orchestrator/compare.h"
#include "base/error.h"
#include "test_util.h"

using nlohmann::json;
namespace orch = autooptim::orchestrator;
using autooptim::test::TempDir;

namespace {

// A timing summary as the gate writes it: spread = (max-min)/median.
json timing(double median, double spread) {
  const double lo = median * (1 - spread / 2), hi = median * (1 + spread / 2);
  return {{"median_s", median}, {"min_s", lo}, {"max_s", hi}, {"spread", spread}, {"runs_s", {lo, median, hi}}};
}

json candidate(const std::string& id, double speedup, double psnr, double spread, double base_s = 2.0) {
  return {{"id", id},
          {"family", "cache"},
          {"speedup", speedup},
          {"psnr", psnr},
          {"ssim", psnr >= 100 ? 1.0 : 0.95},
          {"accepted", true},
          {"gated", true},
          {"baseline_timing", timing(base_s, spread)},
          {"candidate_timing", timing(base_s / speedup, spread)},
          {"baseline_seconds", base_s},
          {"candidate_seconds", base_s / speedup}};
}

json tier(const std::string& id, double speedup, double psnr) {
  return {{"manifest", id},    {"speedup", speedup},      {"psnr", psnr}, {"ssim", psnr >= 100 ? 1.0 : 0.95},
          {"family", "cache"}, {"heldout_accepted", true}};
}

// A report with a 1.5x tier (lossless kernel candidate) and a 2x tier (lossy cache candidate), each timed
// with the given spread; baseline 2 s.
json report(double s15 = 1.6, double s2 = 2.2, double psnr2 = 34.0, double spread = 0.05, double base_s = 2.0) {
  json r = {
      {"schema_version", 2},
      {"model", "wan22-tiny"},
      {"device", "cpu"},
      {"device_name", "test cpu"},
      {"config", {{"frames", 49}, {"height", 96}, {"width", 160}, {"steps", 4}}},
      {"baseline", {{"manifest", "wan22-tiny/baseline"}, {"seconds", base_s}, {"timing", timing(base_s, spread)}}},
      {"tiers",
       {{"1.5x", tier("wan22-tiny/kernel/fused", s15, 100.0)},
        {"2x", tier("wan22-tiny/cache/t0.05", s2, psnr2)},
        {"3x", nullptr},
        {"4x", nullptr}}},
      {"environment",
       {{"timestamp", "2026-12-03T02:00:00.000Z"},
        {"thresholds", {{"min_psnr_db", 30.0}, {"min_margin", 0.03}}},
        {"build", {{"commit", "0123456789abcdef"}}}}},
      {"candidates", json::array()}};
  r["candidates"].push_back(candidate("wan22-tiny/kernel/fused", s15, 100.0, spread, base_s));
  r["candidates"].push_back(candidate("wan22-tiny/cache/t0.05", s2, psnr2, spread, base_s));
  return r;
}

const json* find_tier(const orch::Comparison& c, const std::string& bucket) {
  for (const auto& t : c.result["tiers"])
    if (t["tier"] == bucket) return &t;
  return nullptr;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

struct Cli {
  int code = -1;
  std::string out, err;
};
Cli run_compare(const TempDir& tmp, const std::string& args) {
  const std::string cmd =
      std::string(AUTOOPTIM_BIN) + " compare " + args + " >" + tmp.file("stdout") + " 2>" + tmp.file("stderr");
  const int status = std::system(cmd.c_str());
  Cli r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream o, e;
  o << std::ifstream(tmp.file("stdout")).rdbuf();
  e << std::ifstream(tmp.file("stderr")).rdbuf();
  r.out = o.str();
  r.err = e.str();
  return r;
}

}  // namespace

TEST(Compare, IdenticalReportsHaveNoRegression) {
  const auto c = orch::compare_reports(report(), report());
  EXPECT_EQ(c.exit_code(), 0);
  EXPECT_TRUE(c.regressions.empty());
  EXPECT_EQ((*find_tier(c, "1.5x"))["status"], "unchanged");
  EXPECT_EQ((*find_tier(c, "2x"))["status"], "unchanged");
  EXPECT_EQ((*find_tier(c, "3x"))["status"], "not reached");
  EXPECT_EQ(c.result["baseline"]["status"], "unchanged");
}

TEST(Compare, NoiseIsTheRecordedTimingSpread) {
  std::string how;
  const json r = report(1.6, 2.2, 34.0, 0.08);
  EXPECT_NEAR(orch::tier_noise(r, r["tiers"]["2x"], &how), 0.08, 1e-12);
  EXPECT_EQ(how, "timing spread");
  // The larger of the candidate's and its baseline's spread.
  json r2 = r;
  r2["candidates"][1]["candidate_timing"]["spread"] = 0.12;
  EXPECT_NEAR(orch::tier_noise(r2, r2["tiers"]["2x"]), 0.12, 1e-12);
  // Not recorded: the gate's minimum margin stands in.
  json r3 = r;
  r3["candidates"] = json::array();
  EXPECT_NEAR(orch::tier_noise(r3, r3["tiers"]["2x"], &how), 0.03, 1e-12);
  EXPECT_NE(how.find("gate margin"), std::string::npos);
}

TEST(Compare, SpeedupDropWithinTheNoiseIsNotARegression) {
  // Both runs' spread is 5%: a drop up to 10% is within the noise.
  const auto c = orch::compare_reports(report(1.6, 2.2), report(1.6, 2.2 * 0.92));
  EXPECT_EQ(c.exit_code(), 0) << c.result.dump(1);
  EXPECT_NEAR((*find_tier(c, "2x"))["speedup_change"].get<double>(), -0.08, 1e-9);
}

TEST(Compare, SpeedupDropBeyondTheNoiseIsARegression) {
  const auto c = orch::compare_reports(report(1.6, 2.2), report(1.6, 2.2 * 0.85));
  ASSERT_EQ(c.exit_code(), 1);
  ASSERT_EQ(c.regressions.size(), 1u);
  EXPECT_NE(c.regressions[0].find("tier 2x"), std::string::npos);
  EXPECT_NE(c.regressions[0].find("speedup"), std::string::npos);
  EXPECT_EQ((*find_tier(c, "2x"))["status"], "regression");
  EXPECT_EQ((*find_tier(c, "1.5x"))["status"], "unchanged");
  // Noisier runs (20% spread each) recorded 40% of noise together, but the noise is bounded (10% by default):
  // a 15% drop is still a regression, and the bound is stated.
  const auto noisy = orch::compare_reports(report(1.6, 2.2, 34, 0.2), report(1.6, 2.2 * 0.85, 34, 0.2));
  EXPECT_EQ(noisy.exit_code(), 1);
  EXPECT_NEAR((*find_tier(noisy, "2x"))["noise"]["allowed"].get<double>(), 0.10, 1e-12);
  EXPECT_NEAR((*find_tier(noisy, "2x"))["noise"]["bound"].get<double>(), 0.10, 1e-12);
  // A user who knows the machine is that noisy raises the bound.
  orch::CompareOptions loose;
  loose.max_noise = 0.5;
  EXPECT_EQ(orch::compare_reports(report(1.6, 2.2, 34, 0.2), report(1.6, 2.2 * 0.85, 34, 0.2), loose).exit_code(), 0);
}

TEST(Compare, FasterAndNewTiersAreNotRegressions) {
  json n = report(1.6, 2.2 * 1.3);
  n["tiers"]["3x"] = tier("wan22-tiny/composite/a-plus-b", 3.1, 31.0);
  n["candidates"].push_back(candidate("wan22-tiny/composite/a-plus-b", 3.1, 31.0, 0.05));
  const auto c = orch::compare_reports(report(), n);
  EXPECT_EQ(c.exit_code(), 0);
  EXPECT_EQ((*find_tier(c, "2x"))["status"], "faster");
  EXPECT_EQ((*find_tier(c, "3x"))["status"], "new");
}

TEST(Compare, ALostTierIsARegression) {
  json n = report();
  n["tiers"]["2x"] = nullptr;
  const auto c = orch::compare_reports(report(), n);
  ASSERT_EQ(c.exit_code(), 1);
  EXPECT_NE(c.regressions[0].find("tier 2x: lost"), std::string::npos);
}

TEST(Compare, QualityDropBeyondToleranceIsARegression) {
  EXPECT_EQ(orch::compare_reports(report(1.6, 2.2, 34.0), report(1.6, 2.2, 33.8)).exit_code(), 0);
  const auto c = orch::compare_reports(report(1.6, 2.2, 34.0), report(1.6, 2.2, 31.0));
  ASSERT_EQ(c.exit_code(), 1);
  EXPECT_NE(c.regressions[0].find("worst PSNR"), std::string::npos);
  EXPECT_NEAR((*find_tier(c, "2x"))["psnr_change_db"].get<double>(), -3.0, 1e-9);
  // A lossless tier that stops being identical is a quality regression.
  json n = report();
  n["tiers"]["1.5x"]["psnr"] = 60.0;
  EXPECT_EQ(orch::compare_reports(report(), n).exit_code(), 1);
  // A looser tolerance accepts the 3 dB drop.
  orch::CompareOptions loose;
  loose.psnr_tolerance_db = 5;
  EXPECT_EQ(orch::compare_reports(report(1.6, 2.2, 34.0), report(1.6, 2.2, 31.0), loose).exit_code(), 0);
}

TEST(Compare, SlowerBaselineBeyondNoiseIsARegressionOnTheSameDeviceOnly) {
  const auto c = orch::compare_reports(report(), report(1.6, 2.2, 34, 0.05, 2.5));
  ASSERT_EQ(c.exit_code(), 1);
  EXPECT_NE(c.regressions[0].find("baseline"), std::string::npos);
  EXPECT_EQ(orch::compare_reports(report(), report(1.6, 2.2, 34, 0.05, 2.15)).exit_code(), 0);  // +7.5% < 10% noise
  json n = report(1.6, 2.2, 34, 0.05, 2.5);
  n["device_name"] = "another cpu";
  const auto d = orch::compare_reports(report(), n);
  EXPECT_EQ(d.exit_code(), 0);
  EXPECT_FALSE(d.result["notes"].empty());
  // A run that measured no baseline at all.
  json z = report();
  z["baseline"] = {{"manifest", "wan22-tiny/baseline"}, {"seconds", 0.0}, {"reason", "time budget spent"}};
  EXPECT_EQ(orch::compare_reports(report(), z).exit_code(), 1);
}

TEST(Compare, DifferentModelsCannotBeCompared) {
  json n = report();
  n["model"] = "wan22-ti2v-5b";
  EXPECT_THROW(orch::compare_reports(report(), n), autooptim::Error);
}

TEST(CompareCli, ExitCodesAndMessages) {
  TempDir tmp;
  write(tmp.file("old.json"), report().dump(2));
  write(tmp.file("same.json"), report().dump(2));
  write(tmp.file("slower.json"), report(1.6, 1.5).dump(2));  // 2x tier speedup 2.2 -> 1.5
  json lost = report();
  lost["tiers"]["1.5x"] = nullptr;
  write(tmp.file("lost.json"), lost.dump());

  auto r = run_compare(tmp, tmp.file("old.json") + " " + tmp.file("same.json") + " --json " + tmp.file("cmp.json"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tier 2x: 2.20x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no regression"), std::string::npos) << r.out;
  std::stringstream js;
  js << std::ifstream(tmp.file("cmp.json")).rdbuf();
  const json cmp = json::parse(js.str());
  EXPECT_EQ(cmp["tiers"].size(), 4u);
  EXPECT_TRUE(cmp["regressions"].empty());

  r = run_compare(tmp, tmp.file("old.json") + " " + tmp.file("slower.json"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("REGRESSION"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 regression(s)"), std::string::npos) << r.out;

  r = run_compare(tmp, tmp.file("old.json") + " " + tmp.file("lost.json"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tier 1.5x: lost"), std::string::npos) << r.out;
}

TEST(CompareCli, BadInputIsExit2WithOneMessage) {
  TempDir tmp;
  write(tmp.file("old.json"), report().dump());
  write(tmp.file("broken.json"), "{\"schema_version\": 2, \"model\": ");
  json old_schema = report();
  old_schema["schema_version"] = 1;
  write(tmp.file("v1.json"), old_schema.dump());
  json no_tiers = report();
  no_tiers.erase("tiers");
  write(tmp.file("notiers.json"), no_tiers.dump());
  json bad_tier = report();
  bad_tier["tiers"]["2x"]["speedup"] = "fast";
  write(tmp.file("badtier.json"), bad_tier.dump());
  json other = report();
  other["model"] = "wan22-ti2v-5b";
  write(tmp.file("other.json"), other.dump());

  struct Case {
    std::string file, message;
  } cases[] = {{tmp.file("missing.json"), "no such file"},
               {tmp.file("broken.json"), "not valid JSON"},
               {tmp.file("v1.json"), "schema_version 1"},
               {tmp.file("notiers.json"), "no \"tiers\""},
               {tmp.file("badtier.json"), "tier 2x has no number \"speedup\""},
               {tmp.file("other.json"), "different models"},
               {tmp.path().string(), "is a folder"}};
  for (const auto& c : cases) {
    const auto r = run_compare(tmp, tmp.file("old.json") + " " + c.file);
    EXPECT_EQ(r.code, 2) << c.file << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.file << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.file << ": nothing printed before the error: " << r.out;
    // One message: a single line on stderr.
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}
