// The gate harness on the embedded tiny model, including the red-team cases that must stay green:
// each dishonest or broken manifest is rejected by the gate that exists to catch it.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gates/gate.h"
#include "runtime/error.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::gates;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kSrc = AUTOOPTIM_SOURCE_DIR;

// One worker (the model is loaded once) for every test in this file.
Worker& worker() {
  static Worker w(runtime::LoadRequest{});
  return w;
}

Manifest baseline() { return load_manifest(kSrc + "/manifests/wan22-tiny/baseline.json"); }

Manifest patch(const std::string& slug, const json& flags, bool lossless, const std::string& family = "kernel") {
  Manifest m = baseline();
  m.id = "wan22-tiny/test/" + slug;
  m.kind = "patch";
  m.family = family;
  m.base = "wan22-tiny/baseline";
  m.flags = flags;
  m.lossless = lossless;
  return parse_manifest(to_json(m), "test " + slug);
}

struct Fixture {
  test::TempDir tmp;
  GateSettings settings;
  Fixture() {
    settings.prompts_dir = kSrc + "/prompts";
    settings.manifests_dir = kSrc + "/manifests";
    settings.cache_dir = tmp.file("cache");
    settings.timing_repeats = 2;
    settings.max_prompts = 1;
  }
  GateVerdict gate(const Manifest& m, Ledger* ledger = nullptr) {
    return run_gate(worker(), m, "smoke", tmp.file(fs::path(m.id).filename().string()), settings, ledger);
  }
};

bool passed(const GateVerdict& v, const std::string& gate) {
  const auto* c = v.check(gate);
  return c && c->pass;
}

}  // namespace

TEST(Gate, VerdictIsCompleteAndArtifactsHaveFixedNames) {
  Fixture f;
  Ledger ledger(f.tmp.file("ledger.jsonl"));
  const Manifest m = patch("kv", {{"cross_kv_cache", true}, {"timestep_dedup", true}}, true);
  const auto v = f.gate(m, &ledger);
  for (const char* g : {"artifacts", "official_config", "performance", "off_identity", "quality", "visual", "authenticity"})
    EXPECT_NE(v.check(g), nullptr) << g;
  EXPECT_TRUE(passed(v, "artifacts")) << v.to_json().dump(2);
  EXPECT_TRUE(passed(v, "official_config"));
  EXPECT_TRUE(passed(v, "off_identity")) << v.check("off_identity")->reason;
  EXPECT_TRUE(passed(v, "authenticity")) << v.check("authenticity")->reason;
  EXPECT_TRUE(passed(v, "quality")) << v.check("quality")->reason;  // lossless: within 50 dB
  EXPECT_TRUE(passed(v, "visual")) << v.check("visual")->reason;
  // Every timed run's stages, in order: 2 interleaved pairs, the audit, the off run's baseline, the off run.
  const auto& runs = v.check("performance")->details.at("runs");
  ASSERT_EQ(runs.size(), 7u);
  std::vector<std::string> order;
  for (const auto& r : runs) {
    order.push_back(r.at("run").get<std::string>());
    EXPECT_GT(r.at("denoise_s").get<double>(), 0.0);
    EXPECT_LE(r.at("text_s").get<double>() + r.at("denoise_s").get<double>() + r.at("decode_s").get<double>(),
              r.at("total_s").get<double>() + 1e-6);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"baseline", "candidate", "baseline", "candidate", "audit", "baseline", "off"}));
  const fs::path dir = f.tmp.file("kv");
  for (const char* file : {"manifest.json", "metadata.json", "trace.json", "benchmark.json", "quality.json", "verdict.json"})
    EXPECT_TRUE(fs::exists(dir / file)) << file;
  EXPECT_TRUE(fs::exists(dir / "video.mp4") || fs::exists(dir / "video.y4m"));
  const auto rows = ledger.read_all();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["manifest_hash"], manifest_hash(m));
  EXPECT_EQ(rows[0]["gates"].size(), 7u);
}

TEST(Gate, RedTeamNoOpCacheFailsAuthenticity) {
  Fixture f;
  // A threshold so small the cache never skips: no engagement, so no claim.
  const auto v = f.gate(patch("noop", {{"easycache", {{"enabled", true}, {"threshold", 1e-9}}}}, false, "cache"));
  EXPECT_FALSE(v.accepted);
  EXPECT_FALSE(passed(v, "authenticity"));
  EXPECT_NE(v.check("authenticity")->reason.find("no forward was skipped"), std::string::npos) << v.check("authenticity")->reason;
}

TEST(Gate, RedTeamFortyStepsFailsOfficialConfig) {
  Fixture f;
  Manifest m = patch("forty", {{"cross_kv_cache", true}}, true);
  m.config.steps = 40;
  const auto v = f.gate(m);
  EXPECT_FALSE(v.accepted);
  EXPECT_FALSE(passed(v, "official_config"));
  EXPECT_FALSE(passed(v, "quality"));  // the clips are not the baseline's either
}

TEST(Gate, RedTeamOffLeakFailsOffIdentity) {
  set_redteam_allowed(true);
  Fixture f;
  const auto v = f.gate(patch("leak", {{"cross_kv_cache", true}, {"redteam", {{"off_leak", true}}}}, true));
  set_redteam_allowed(false);
  EXPECT_FALSE(v.accepted);
  EXPECT_FALSE(passed(v, "off_identity"));
  EXPECT_EQ(v.failure_signature, "off-identity-break");
}

TEST(Gate, RedTeamLossyBeyondToleranceFailsQuality) {
  Fixture f;
  // Skips nearly every step after one dense step: far from the baseline's clip.
  const auto v = f.gate(patch("cliff", {{"easycache", {{"enabled", true}, {"threshold", 1.0}, {"warmup_steps", 1}, {"dense_last_step", false}}}}, false, "cache"));
  EXPECT_FALSE(v.accepted);
  EXPECT_FALSE(passed(v, "quality")) << v.to_json().dump(2);
  EXPECT_TRUE(passed(v, "authenticity"));  // it did engage: the problem is quality
}

TEST(Gate, RedTeamOutputWrittenBeforeTimingFails) {
  set_redteam_allowed(true);
  Fixture f;
  const auto v = f.gate(patch("early", {{"redteam", {{"write_output_early", true}}}, {"cross_kv_cache", true}}, true));
  set_redteam_allowed(false);
  EXPECT_FALSE(v.accepted);
  EXPECT_FALSE(passed(v, "artifacts"));  // the poisoned buffer was never written
  EXPECT_NE(v.check("artifacts")->reason.find("NaN"), std::string::npos) << v.check("artifacts")->reason;
}

TEST(Gate, SlowerControlIsRejectedOnPerformance) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "one core: the single-thread control is not slower here";
  Fixture f;
  const auto v = f.gate(load_manifest(kSrc + "/manifests/wan22-tiny/control-fp64.json"));
  EXPECT_FALSE(v.accepted);
  EXPECT_FALSE(passed(v, "performance")) << v.check("performance")->reason;
  EXPECT_LT(v.speedup, 1.0);
  EXPECT_EQ(v.checks.size(), 7u);  // a complete verdict, not an early exit
}

TEST(Gate, RejectedManifestIsNotRetriedUnderACosmeticChange) {
  Fixture f;
  Ledger ledger(f.tmp.file("ledger.jsonl"));
  Manifest m = patch("retry", {{"easycache", {{"enabled", true}, {"threshold", 1e-9}}}}, false, "cache");
  const auto first = f.gate(m, &ledger);
  ASSERT_FALSE(first.accepted);
  m.id = "wan22-tiny/test/retry-renamed";
  m.description = "same thing, new name";
  const auto second = f.gate(m, &ledger);
  EXPECT_TRUE(second.refused);
  EXPECT_FALSE(second.accepted);
  EXPECT_EQ(ledger.read_all().size(), 2u);
}

TEST(Gate, RedTeamFlagsAreRefusedUnlessAllowed) {
  EXPECT_THROW(patch("x", {{"redteam", {{"off_leak", true}}}}, true), Error);
}
