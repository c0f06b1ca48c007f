// Composition of candidates across families: a part's flags count only where they differ from the
// baseline's resolved flags (a proposal's manifest spells every flag out), conflicts are refused.
#include <gtest/gtest.h>

#include "executors/executor.h"
#include "gates/manifest.h"
#include "orchestrator/orchestrator.h"

using namespace autooptim;
using nlohmann::json;

namespace {

gates::Manifest base_manifest() {
  return gates::load_manifest(std::string(AUTOOPTIM_SOURCE_DIR) + "/manifests/wan22-tiny/baseline.json");
}

// A proposal as executors write it: every flag resolved, most at the baseline's value.
json resolved_flags(const gates::Manifest& base, const json& flags, const std::string& family) {
  gates::Manifest m = base;
  m.id = base.model + "/" + family + "/x";
  m.kind = "patch";
  m.family = family;
  m.base = base.id;
  m.flags = flags;
  return gates::to_json(gates::parse_manifest(gates::to_json(m), "test"))["flags"];
}

}  // namespace

TEST(Compose, PartsFromTwoFamiliesMergeIntoOneManifest) {
  const auto base = base_manifest();
  const json cache = resolved_flags(base, {{"easycache", {{"enabled", true}, {"threshold", 0.02}, {"warmup_steps", 10}}}}, "cache");
  const json kernel = resolved_flags(base, {{"cross_kv_cache", true}, {"fused_qkv", true}}, "kernel");
  ASSERT_TRUE(cache.contains("fused_qkv"));  // spelled out at the baseline's value: must not conflict
  const json base_flags = gates::to_json(base)["flags"];
  const json merged = orchestrator::compose_flags(base_flags, {cache, kernel});
  ASSERT_TRUE(merged.is_object());
  std::vector<std::string> keys;
  for (const auto& [k, v] : merged.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"cross_kv_cache", "easycache", "fused_qkv"}));
  gates::Manifest c = base;  // as the orchestrator builds a composition
  c.id = "wan22-tiny/composite/x";
  c.kind = "patch";
  c.family = "composite";
  c.base = base.id;
  c.flags = merged;
  const auto o = gates::to_runtime_options(gates::parse_manifest(gates::to_json(c), "composition"));
  EXPECT_TRUE(o.easycache.enabled);
  EXPECT_DOUBLE_EQ(o.easycache.threshold, 0.02);
  EXPECT_TRUE(o.cross_kv_cache && o.fused_qkv);
  EXPECT_FALSE(o.timestep_dedup);
}

TEST(Compose, ConflictingPartsAreRefused) {
  const json base_flags = {{"attention_backend", "auto"}, {"fused_qkv", false}};
  EXPECT_TRUE(orchestrator::compose_flags(base_flags, {{{"attention_backend", "math"}}, {{"attention_backend", "flash"}}}).is_null());
  // Equal settings from two parts are not a conflict; dtype is never taken over from a part.
  const json m = orchestrator::compose_flags(base_flags, {{{"fused_qkv", true}, {"dtype", "fp32"}}, {{"fused_qkv", true}}});
  EXPECT_EQ(m, json({{"fused_qkv", true}}));
}

TEST(Compose, CompositeManifestIsValidAndNamesItsParents) {
  const auto base = base_manifest();
  auto part = [&](const std::string& id, const json& flags, bool lossless) {
    gates::Manifest m = base;
    m.id = id;
    m.kind = "patch";
    m.family = id.substr(id.find('/') + 1, id.rfind('/') - id.find('/') - 1);
    m.base = base.id;
    m.flags = resolved_flags(base, flags, m.family);
    m.lossless = lossless;
    return gates::parse_manifest(gates::to_json(m), "part");
  };
  const auto cache = part("wan22-tiny/cache/easycache-t0.02", {{"easycache", {{"enabled", true}, {"threshold", 0.02}}}}, false);
  const auto kernel = part("wan22-tiny/kernel/cross_kv_cache", {{"cross_kv_cache", true}}, true);
  const auto m = orchestrator::compose_manifest(base, {&cache, &kernel});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->id, "wan22-tiny/composite/easycache-t0.02-plus-cross_kv_cache");
  EXPECT_EQ(m->family, "composite");
  EXPECT_EQ(m->parents, (std::vector<std::string>{cache.id, kernel.id}));
  EXPECT_FALSE(m->lossless);
  const auto o = gates::to_runtime_options(*m);
  EXPECT_TRUE(o.easycache.enabled && o.cross_kv_cache);
  const auto other = part("wan22-tiny/cache/easycache-t0.05", {{"easycache", {{"enabled", true}, {"threshold", 0.05}}}}, false);
  EXPECT_FALSE(orchestrator::compose_manifest(base, {&cache, &other}).has_value());
}

// The cache executor's try order within one policy: the middle point first, then outwards (the more
// aggressive neighbour first), every point exactly once.
TEST(Executors, CachePointsAreTriedMiddleFirst) {
  using autooptim::executors::middle_out;
  EXPECT_EQ(middle_out(0), std::vector<size_t>{});
  EXPECT_EQ(middle_out(1), (std::vector<size_t>{0}));
  EXPECT_EQ(middle_out(2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(middle_out(3), (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(middle_out(6), (std::vector<size_t>{2, 3, 1, 4, 0, 5}));  // EasyCache's six: 0.08 first, then 0.12, 0.05
  EXPECT_EQ(middle_out(7), (std::vector<size_t>{3, 4, 2, 5, 1, 6, 0}));
}

// While candidates are still gated, the run keeps one gate run's worth of its budget per tier winner that
// has no held-out verdict yet: a short budget once spent itself on candidates that could not win and left
// the accepted one unconfirmed (no tier in the report).
TEST(Orchestrator, HeldOutChecksOfTierWinnersKeepTheirShareOfTheBudget) {
  auto v = [](const std::string& hash, bool accepted, double speedup, double psnr) {
    return json{{"manifest_hash", hash}, {"accepted", accepted}, {"speedup", speedup}, {"psnr", psnr}};
  };
  // Nothing accepted: nothing kept.
  EXPECT_EQ(orchestrator::heldout_reserve_s({v("a", false, 2.5, 40)}, {}, 20.0, 1), 0.0);
  // 1.5x winner "b" (best PSNR at >= 1.5x), 2x winner "c" (the only one at >= 2x); "d" is below every tier.
  const std::vector<json> verdicts = {v("b", true, 1.6, 38), v("c", true, 2.1, 31), v("d", true, 1.2, 45), v("e", false, 3.0, 20)};
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s(verdicts, {}, 20.0, 1), 1.25 * 20.0 * 2);
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s(verdicts, {"b"}, 20.0, 1), 1.25 * 20.0);
  EXPECT_EQ(orchestrator::heldout_reserve_s(verdicts, {"b", "c"}, 20.0, 1), 0.0);
  // Two workers check both at once.
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s(verdicts, {}, 20.0, 2), 1.25 * 20.0);
  // One candidate winning two tiers is checked once.
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s({v("f", true, 2.2, 35)}, {}, 10.0, 1), 1.25 * 10.0);
  EXPECT_EQ(orchestrator::heldout_reserve_s(verdicts, {}, 0.0, 1), 0.0);  // no gate run timed yet
}
