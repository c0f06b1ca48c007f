// Composition of candidates across families: a part's flags count only where they differ from the
// baseline's resolved flags (a proposal's manifest spells every flag out), conflicts are refused.
// Also the executors' search decisions that need no model: the cache order and the closest miss.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "executors/executor.h"
#include "executors/search.h"
#include "gates/manifest.h"
#include "orchestrator/orchestrator.h"
#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/techniques/kernel/attention_backend_options.h"
#include "runtime/techniques/kernel/cross_kv_cache_options.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"
#include "runtime/techniques/kernel/gelu_epilogue_options.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/quant/fp8_linear_options.h"

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

// A candidate of family F as an executor proposes it: id <model>/F/<name>, every flag resolved.
gates::Manifest part_manifest(const gates::Manifest& base, const std::string& id, const json& flags, bool lossless) {
  gates::Manifest m = base;
  m.id = id;
  m.kind = "patch";
  m.family = id.substr(id.find('/') + 1, id.rfind('/') - id.find('/') - 1);
  m.base = base.id;
  m.flags = resolved_flags(base, flags, m.family);
  m.lossless = lossless;
  return gates::parse_manifest(gates::to_json(m), "part");
}

}  // namespace

TEST(Compose, PartsFromTwoFamiliesMergeIntoOneManifest) {
  const auto base = base_manifest();
  const json cache =
      resolved_flags(base, {{"easycache", {{"enabled", true}, {"threshold", 0.02}, {"warmup_steps", 10}}}}, "cache");
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
  EXPECT_TRUE(o.of<runtime::EasyCacheOptions>().enabled);
  EXPECT_DOUBLE_EQ(o.of<runtime::EasyCacheOptions>().threshold, 0.02);
  EXPECT_TRUE(o.of<runtime::CrossKvCacheOptions>().on && o.of<runtime::FusedQkvOptions>().on);
  EXPECT_FALSE(o.of<runtime::TimestepDedupOptions>().on);
}

TEST(Compose, ConflictingPartsAreRefused) {
  const json base_flags = {{"attention_backend", "auto"}, {"fused_qkv", false}};
  EXPECT_TRUE(
      orchestrator::compose_flags(base_flags, {{{"attention_backend", "math"}}, {{"attention_backend", "flash"}}})
          .is_null());
  // Equal settings from two parts are not a conflict; dtype is never taken over from a part.
  const json m =
      orchestrator::compose_flags(base_flags, {{{"fused_qkv", true}, {"dtype", "fp32"}}, {{"fused_qkv", true}}});
  EXPECT_EQ(m, json({{"fused_qkv", true}}));
}

TEST(Compose, CompositeManifestIsValidAndNamesItsParents) {
  const auto base = base_manifest();
  auto part = [&](const std::string& id, const json& flags, bool lossless) {
    return part_manifest(base, id, flags, lossless);
  };
  const auto cache =
      part("wan22-tiny/cache/easycache-t0.02", {{"easycache", {{"enabled", true}, {"threshold", 0.02}}}}, false);
  const auto kernel = part("wan22-tiny/kernel/cross_kv_cache", {{"cross_kv_cache", true}}, true);
  const auto m = orchestrator::compose_manifest(base, {&cache, &kernel});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->id, "wan22-tiny/composite/easycache-t0.02-plus-cross_kv_cache");
  EXPECT_EQ(m->family, "composite");
  EXPECT_EQ(m->parents, (std::vector<std::string>{cache.id, kernel.id}));
  EXPECT_FALSE(m->lossless);
  const auto o = gates::to_runtime_options(*m);
  EXPECT_TRUE(o.of<runtime::EasyCacheOptions>().enabled && o.of<runtime::CrossKvCacheOptions>().on);
  const auto other =
      part("wan22-tiny/cache/easycache-t0.05", {{"easycache", {{"enabled", true}, {"threshold", 0.05}}}}, false);
  EXPECT_FALSE(orchestrator::compose_manifest(base, {&cache, &other}).has_value());
}

// A part's technique that another part's supersedes would sit idle and fail the engagement check: the
// composition leaves it out and says so (kernel's GELU epilogue under quant's FP8 GEMMs).
TEST(Compose, ATechniqueAnotherPartSupersedesIsLeftOut) {
  const auto base = base_manifest();
  auto part = [&](const std::string& id, const json& flags) { return part_manifest(base, id, flags, false); };
  const auto kernel =
      part("wan22-tiny/kernel/greedy", {{"gelu_epilogue", true}, {"fused_qkv", true}, {"attention_backend", "cudnn"}});
  const auto quant = part("wan22-tiny/quant/fp8", {{"quant", {{"fp8", true}}}});
  const auto m = orchestrator::compose_manifest(base, {&kernel, &quant});
  ASSERT_TRUE(m.has_value());
  const auto o = gates::to_runtime_options(*m);
  EXPECT_TRUE(o.of<runtime::QuantOptions>().fp8 && o.of<runtime::FusedQkvOptions>().on);
  EXPECT_EQ(o.of<runtime::AttentionBackendOptions>().backend, "cudnn");  // nothing here supersedes it
  EXPECT_FALSE(o.of<runtime::GeluEpilogueOptions>().on);
  EXPECT_FALSE(m->flags.contains("gelu_epilogue"));
  EXPECT_NE(m->description.find("gelu_epilogue left out (fp8 does its work)"), std::string::npos) << m->description;
  // Without the superseding part, the kernel part's flags are kept whole.
  const auto cache =
      part("wan22-tiny/cache/easycache-t0.02", {{"easycache", {{"enabled", true}, {"threshold", 0.02}}}});
  const auto alone = orchestrator::compose_manifest(base, {&kernel, &cache});
  ASSERT_TRUE(alone.has_value());
  EXPECT_TRUE(gates::to_runtime_options(*alone).of<runtime::GeluEpilogueOptions>().on);
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

namespace {

using executors::Candidate;
using executors::Trial;

// The cache executor's order for a run of 50 steps, from the registry.
std::vector<Candidate> cache_order_of_registry() {
  std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>> space;
  for (const auto& t : runtime::techniques::all())
    if (t.family == "cache" && t.search)
      for (auto& p : t.search({50, false})) space.push_back({&t, std::move(p)});
  return executors::cache_order(space);
}

std::vector<std::string> labels(const std::vector<Candidate>& order) {
  std::vector<std::string> out;
  for (const auto& c : order) out.push_back(c.label);
  return out;
}

Trial trial(double speedup, double psnr, bool engaged) {
  Trial t;
  t.speedup = speedup;
  t.psnr_min = psnr;
  if (!engaged) t.not_engaged = {"x is on but no forward was skipped"};
  return t;
}

}  // namespace

// Round robin across the cache policies, each one's middle point first: TaylorSeer's interval 4 is its first.
TEST(Executors, CacheOrderIsRoundRobinMiddleFirst) {
  const auto order = cache_order_of_registry();
  std::vector<std::string> first_round, taylorseer;
  std::set<const runtime::techniques::Technique*> seen;
  for (const auto& c : order) {
    if (seen.insert(c.tech).second) first_round.push_back(c.label);
    if (c.tech->name == "taylorseer") taylorseer.push_back(c.label);
  }
  const auto all_labels = labels(order);
  ASSERT_GE(all_labels.size(), first_round.size());
  EXPECT_EQ(std::vector<std::string>(all_labels.begin(), all_labels.begin() + static_cast<long>(first_round.size())),
            first_round);
  EXPECT_EQ(taylorseer, (std::vector<std::string>{"taylorseer-o1-n4", "taylorseer-o1-n6", "taylorseer-o1-n3",
                                                  "taylorseer-o1-n8", "taylorseer-o1-n2"}));
  EXPECT_EQ(order.front().label, "easycache-o1-t0.15");
}

// An adaptive policy's trial that skipped nothing brings the next fixed-schedule point forward; an engaged one,
// or a fixed-schedule one, changes nothing.
TEST(Executors, AnAdaptivePolicyThatSkippedNothingBringsTheFixedScheduleForward) {
  const auto original = cache_order_of_registry();
  ASSERT_FALSE(original.front().tech->fixed_schedule);
  auto order = original;
  order[0].trial = trial(1.0, 100, true);
  EXPECT_FALSE(executors::fixed_schedule_next(order, 1, order[0]));  // engaged: the order holds
  EXPECT_EQ(labels(order), labels(original));

  order[0].trial = trial(1.0, 100, false);
  ASSERT_TRUE(executors::fixed_schedule_next(order, 1, order[0]));
  EXPECT_EQ(order[1].label, "taylorseer-o1-n4");
  // The others keep their order behind it.
  auto rest = labels(original);
  rest.erase(std::find(rest.begin(), rest.end(), "taylorseer-o1-n4"));
  auto moved = labels(order);
  moved.erase(moved.begin() + 1);
  EXPECT_EQ(moved, rest);

  // The fixed schedule's own trial never reorders; the next adaptive miss brings its next point.
  order[1].trial = trial(0.9, 20, false);
  EXPECT_FALSE(executors::fixed_schedule_next(order, 2, order[1]));
  ASSERT_FALSE(order[2].tech->fixed_schedule);
  order[2].trial = trial(1.0, 100, false);
  ASSERT_TRUE(executors::fixed_schedule_next(order, 3, order[2]));
  EXPECT_EQ(order[3].label, "taylorseer-o1-n6");
  // Nothing left to bring forward once every fixed-schedule point is behind.
  const size_t end = order.size();
  EXPECT_FALSE(executors::fixed_schedule_next(order, end, order[2]));
  std::vector<Candidate> adaptive_only;
  for (const auto& c : original)
    if (!c.tech->fixed_schedule) adaptive_only.push_back(c);
  EXPECT_FALSE(executors::fixed_schedule_next(adaptive_only, 1, order[2]));
}

// A family with no proposal offers its closest miss: the engaged, faster trial with the best PSNR.
TEST(Executors, TheClosestMissIsTheEngagedFasterTrialWithTheBestPsnr) {
  const auto* ts = runtime::techniques::find("taylorseer");
  std::vector<Candidate> tried = {
      {ts, "slow-but-good", {}, trial(0.95, 40, true)},  // not faster
      {ts, "idle", {}, trial(1.5, 100, false)},          // not engaged
      {ts, "fast-poor", {}, trial(2.0, 14, true)},      {ts, "closest", {}, trial(1.3, 21.5, true)},
      {ts, "fast-poorer", {}, trial(2.5, 11, true)},
  };
  const Candidate* c = executors::closest_miss(tried);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->label, "closest");
  EXPECT_EQ(executors::closest_miss({tried[0], tried[1]}), nullptr);
  EXPECT_EQ(executors::closest_miss({}), nullptr);
}

// The kernel executor's starting set on a GPU: every kernel switch the registry offers, at most one of each
// slot, so the first trial is a valid manifest (two ways of computing the VAE's upsamplers are one
// exclusive group); the other upsampler and the other head padding wait as alternatives, and a flag two
// points share (vae_channels_last) is tried once.
TEST(Executors, TheKernelStartingSetIsAValidManifestWithTheRestAsAlternatives) {
  std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>> space;
  for (const auto& t : runtime::techniques::all())
    if (t.family == "kernel" && t.search)
      for (auto& p : t.search({50, /*gpu=*/true})) space.push_back({&t, std::move(p)});
  const executors::KernelSwitches k = executors::kernel_switches(space);
  json flags = json::object();
  for (const auto& [key, value] : k.on) {
    EXPECT_FALSE(flags.contains(key)) << key << " is on twice";
    flags[key] = value;
  }
  EXPECT_EQ(flags["vae_subpixel_upsample"], true);
  EXPECT_FALSE(flags.contains("vae_transposed_upsample"));
  EXPECT_EQ(flags["vae_head_pad"], 16);
  std::set<std::string> alternatives;
  for (const auto& [key, value] : k.alternatives) alternatives.insert(key + "=" + value.dump());
  EXPECT_EQ(alternatives.count("vae_transposed_upsample=true"), 1u);
  EXPECT_EQ(alternatives.count("vae_head_pad=32"), 1u);
  EXPECT_EQ(alternatives.count("vae_channels_last=true"), 0u) << "shared by two points: once, in the starting set";
  EXPECT_EQ(k.slot.at("vae_transposed_upsample"), k.slot.at("vae_subpixel_upsample"));
  // Superseded switches wait: the Hopper kernel takes every attention, one timestep per sample leaves
  // no rows to deduplicate (on, they would fail the engagement check).
  EXPECT_EQ(flags["hopper_attention"], 6);
  EXPECT_EQ(flags["uniform_timestep"], true);
  EXPECT_FALSE(flags.contains("attention_backend"));
  EXPECT_FALSE(flags.contains("timestep_dedup"));
  EXPECT_EQ(alternatives.count("timestep_dedup=true"), 1u);
  EXPECT_EQ(alternatives.count("attention_backend=\"cudnn\""), 1u);
  // The lossy switches lead the starting set (the ablation removes in this order), then the lossless ones.
  size_t lossy = 0;
  while (lossy < k.on.size() && !k.lossless.at(k.on[lossy].first)) ++lossy;
  EXPECT_GT(lossy, 0u);
  for (size_t i = lossy; i < k.on.size(); ++i)
    EXPECT_TRUE(k.lossless.at(k.on[i].first)) << k.on[i].first << " after a lossless switch";
  EXPECT_NE(k.slot.at("vae_frame_convs"), k.slot.at("vae_subpixel_upsample"));
  // The starting set is a manifest the gates accept (before: both upsamplers on, refused).
  const gates::Manifest base = base_manifest();
  gates::Manifest m = base;
  m.id = base.model + "/kernel/all";
  m.kind = "patch";
  m.family = "kernel";
  m.base = base.id;
  m.flags = flags;
  EXPECT_NO_THROW(gates::parse_manifest(gates::to_json(m), "the starting set"));
  // With an alternative swapped in, still one upsampler.
  m.flags.erase("vae_subpixel_upsample");
  m.flags["vae_transposed_upsample"] = true;
  EXPECT_NO_THROW(gates::parse_manifest(gates::to_json(m), "the alternative"));
  m.flags["vae_subpixel_upsample"] = true;
  EXPECT_THROW(gates::parse_manifest(gates::to_json(m), "both"), std::exception);
}

// While candidates are still gated, the run keeps one gate run's worth of its budget per tier winner that
// has no held-out verdict yet: a short budget once spent itself on candidates that could not win and left
// the accepted one unconfirmed (no tier in the report).
TEST(Orchestrator, HeldOutChecksOfTierWinnersKeepTheirShareOfTheBudget) {
  auto v = [](const std::string& hash, bool accepted, double speedup, double psnr) {
    orchestrator::GateRecord r;
    r.manifest_hash = hash;
    r.accepted = accepted;
    r.speedup = speedup;
    r.psnr = psnr;
    return r;
  };
  // Nothing accepted: nothing kept.
  EXPECT_EQ(orchestrator::heldout_reserve_s({v("a", false, 2.5, 40)}, {}, 20.0, 1), 0.0);
  // 1.5x winner "b" (best PSNR at >= 1.5x), 2x winner "c" (the only one at >= 2x); "d" is below every tier.
  const std::vector<orchestrator::GateRecord> verdicts = {v("b", true, 1.6, 38), v("c", true, 2.1, 31),
                                                          v("d", true, 1.2, 45), v("e", false, 3.0, 20)};
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s(verdicts, {}, 20.0, 1), 1.25 * 20.0 * 2);
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s(verdicts, {"b"}, 20.0, 1), 1.25 * 20.0);
  EXPECT_EQ(orchestrator::heldout_reserve_s(verdicts, {"b", "c"}, 20.0, 1), 0.0);
  // Two workers check both at once.
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s(verdicts, {}, 20.0, 2), 1.25 * 20.0);
  // One candidate winning two tiers is checked once.
  EXPECT_DOUBLE_EQ(orchestrator::heldout_reserve_s({v("f", true, 2.2, 35)}, {}, 10.0, 1), 1.25 * 10.0);
  EXPECT_EQ(orchestrator::heldout_reserve_s(verdicts, {}, 0.0, 1), 0.0);  // no gate run timed yet
  // The gate-run budget keeps one run per winner still to be checked, whatever the timings.
  EXPECT_EQ(orchestrator::heldout_pending(verdicts, {}), 2);
  EXPECT_EQ(orchestrator::heldout_pending(verdicts, {"c"}), 1);
  EXPECT_EQ(orchestrator::heldout_pending(verdicts, {"b", "c"}), 0);
  EXPECT_EQ(orchestrator::heldout_pending({v("f", true, 2.2, 35)}, {}), 1);
  EXPECT_EQ(orchestrator::heldout_pending({v("a", false, 2.5, 40)}, {}), 0);
}
