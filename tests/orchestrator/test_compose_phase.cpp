// The compose phase: which compositions a round makes from the candidates gated so far.
#include <gtest/gtest.h>

#include <algorithm>

#include "orchestrator/phases/phases.h"
#include "run_state_fixture.h"

using namespace autooptim;
using namespace autooptim::orchestrator;
using nlohmann::json;
using orchestrator::testing::candidate;
using orchestrator::testing::RunStateTest;
using orchestrator::testing::verdict;

namespace {

const json kCrossKv = {{"cross_kv_cache", true}};
const json kFusedQkv = {{"fused_qkv", true}};
const json kEasyCache = {{"easycache", {{"enabled", true}, {"threshold", 0.02}}}};
const json kSparse = {{"sparse", {{"pattern", "frame_window"}}}};

std::vector<std::string> ids(const std::vector<Candidate>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.m.id);
  return out;
}

}  // namespace

// Each family's fastest accepted candidate, composed in pairs; a rejected family takes no part; a
// composition already made is not made again.
TEST_F(RunStateTest, ARoundComposesEachFamilysFastestAcceptedCandidate) {
  auto& s = state();
  s.cands = {candidate(s.base, "kernel", "slow", kCrossKv, verdict(true, 1.2, 40)),
             candidate(s.base, "kernel", "fast", kFusedQkv, verdict(true, 1.4, 40)),
             candidate(s.base, "cache", "easy", kEasyCache, verdict(true, 1.3, 35)),
             candidate(s.base, "sparse", "window", kSparse, verdict(false, 2.0, 20, "quality")),
             candidate(s.base, "cache", "ungated", kEasyCache, nullptr)};
  for (const auto& c : s.cands) s.seen.insert(c.hash);
  const auto fresh = next_compositions(s);
  ASSERT_EQ(ids(fresh), (std::vector<std::string>{"wan22-tiny/composite/easy-plus-fast"}));
  EXPECT_EQ(fresh[0].m.parents, (std::vector<std::string>{"wan22-tiny/cache/easy", "wan22-tiny/kernel/fast"}));
  EXPECT_EQ(fresh[0].hash, gates::manifest_hash(fresh[0].m));
  EXPECT_FALSE(fresh[0].val.has_value());
  EXPECT_TRUE(s.seen.count(fresh[0].hash));
  EXPECT_TRUE(next_compositions(s).empty());
}

// Three families: every pair and the three together.
TEST_F(RunStateTest, ThreeFamiliesMakeThreePairsAndTheTriple) {
  auto& s = state();
  s.cands = {candidate(s.base, "kernel", "k", kCrossKv, verdict(true, 1.2, 40)),
             candidate(s.base, "cache", "c", kEasyCache, verdict(true, 1.3, 35)),
             candidate(s.base, "sparse", "w", kSparse, verdict(true, 1.6, 30))};
  const auto fresh = next_compositions(s);
  EXPECT_EQ(ids(fresh),
            (std::vector<std::string>{"wan22-tiny/composite/c-plus-k", "wan22-tiny/composite/c-plus-w",
                                      "wan22-tiny/composite/k-plus-w", "wan22-tiny/composite/c-plus-k-plus-w"}));
}

// On a reduced configuration nothing is accepted: what passed every gate but the official-config one composes.
TEST_F(RunStateTest, AReducedRunComposesWhatFailedOnlyTheOfficialConfiguration) {
  gates::Manifest base = gates::pinned_baseline("wan22-tiny");
  base.config = gates::with_sizes(base.config, 0, 2, 0, 0);
  auto& s = state(gates::parse_manifest(gates::to_json(base), "reduced"));
  ASSERT_FALSE(s.official);
  s.cands = {candidate(s.base, "kernel", "k", kCrossKv, verdict(false, 1.2, 40, "official_config")),
             candidate(s.base, "cache", "c", kEasyCache, verdict(false, 1.3, 35, "official_config")),
             candidate(s.base, "sparse", "w", kSparse, verdict(false, 1.6, 30, "quality"))};
  EXPECT_EQ(ids(next_compositions(s)), (std::vector<std::string>{"wan22-tiny/composite/c-plus-k"}));
}
