// The tiers phase: per bucket the best-quality accepted candidate that holds on the held-out prompts,
// each checked there once, and the notes that say why a bucket is empty.
#include <gtest/gtest.h>

#include <map>

#include "orchestrator/phases/phases.h"
#include "run_state_fixture.h"

using namespace autooptim;
using namespace autooptim::orchestrator;
using nlohmann::json;
using orchestrator::testing::candidate;
using orchestrator::testing::record;
using orchestrator::testing::RunStateTest;
using orchestrator::testing::verdict;

namespace {

std::vector<std::string> notes_of(const json& tier_notes, const std::string& bucket) {
  std::vector<std::string> out;
  for (const auto& n : tier_notes[bucket]) out.push_back(n.get<std::string>());
  return out;
}

}  // namespace

TEST_F(RunStateTest, EachBucketTakesTheBestQualityCandidateThatHoldsHeldOut) {
  auto& s = state();
  s.cands = {candidate(s.base, "kernel", "a", {{"cross_kv_cache", true}}, verdict(true, 1.6, 40)),
             candidate(s.base, "cache", "b", {{"easycache", {{"enabled", true}}}}, verdict(true, 2.5, 35)),
             candidate(s.base, "sparse", "c", {{"sparse", {{"pattern", "frame_window"}}}},
                       verdict(false, 3.2, 45, "quality"))};
  // Held out, a holds 1.5x; b falls to 1.9x, below its 2x.
  const std::map<std::string, GateRecord> heldout = {{"wan22-tiny/kernel/a", record(true, 1.55, 39)},
                                                     {"wan22-tiny/cache/b", record(true, 1.9, 34)}};
  std::map<std::string, int> checks;
  choose_tiers(s, [&](const Candidate& c) -> std::optional<GateRecord> {
    ++checks[c.m.id];
    return heldout.at(c.m.id);
  });
  EXPECT_EQ(checks, (std::map<std::string, int>{{"wan22-tiny/kernel/a", 1}, {"wan22-tiny/cache/b", 1}}));
  ASSERT_TRUE(s.tiers["1.5x"].is_object());
  EXPECT_EQ(s.tiers["1.5x"]["manifest"], "wan22-tiny/kernel/a");
  EXPECT_DOUBLE_EQ(s.tiers["1.5x"]["heldout_speedup"].get<double>(), 1.55);
  EXPECT_EQ(s.tiers["1.5x"]["switches"], json({"cross_kv_cache"}));
  EXPECT_EQ(s.tiers["1.5x"]["prompts"], s.split_used);
  EXPECT_EQ(s.tiers["1.5x"]["heldout_split_prompts"], s.heldout_all);
  EXPECT_TRUE(notes_of(s.tier_notes, "1.5x").empty());
  for (const char* b : {"2x", "3x", "4x"}) EXPECT_TRUE(s.tiers[b].is_null()) << b;
  const auto two = notes_of(s.tier_notes, "2x");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0], "wan22-tiny/cache/b reached 2.50x on val but not on the held-out prompts (1.90x)");
  EXPECT_EQ(two[1].rfind("nearest miss: wan22-tiny/sparse/c at 3.20x, worst PSNR ", 0), 0u) << two[1];
  EXPECT_NE(two[1].find("failed quality"), std::string::npos) << two[1];
  const auto three = notes_of(s.tier_notes, "3x");
  ASSERT_EQ(three.size(), 2u);
  EXPECT_EQ(three[1], "fastest accepted candidate: wan22-tiny/cache/b at 2.50x");
  EXPECT_EQ(notes_of(s.tier_notes, "4x"),
            (std::vector<std::string>{"fastest accepted candidate: wan22-tiny/cache/b at 2.50x"}));
}

// A held-out check that could not run ends the bucket with its reason; candidates left ungated are counted.
TEST_F(RunStateTest, AnUnrunHeldOutCheckAndUngatedCandidatesAreSaid) {
  auto& s = state();
  s.cands = {candidate(s.base, "kernel", "a", {{"cross_kv_cache", true}}, verdict(true, 1.6, 40)),
             candidate(s.base, "kernel", "b", {{"fused_qkv", true}}, verdict(true, 1.5, 30)),
             candidate(s.base, "composite", "x", {{"fused_qkv", true}, {"cross_kv_cache", true}}, nullptr)};
  s.not_gated[{s.cands[0].hash, req_.heldout_split}] = "time budget spent (--budget-minutes 600.00)";
  int checks = 0;
  choose_tiers(s, [&](const Candidate&) -> std::optional<GateRecord> {
    ++checks;
    return std::nullopt;
  });
  EXPECT_EQ(checks, 1);  // the first in line could not be checked: the bucket ends there
  EXPECT_TRUE(s.tiers["1.5x"].is_null());
  const auto notes = notes_of(s.tier_notes, "1.5x");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0],
            "wan22-tiny/kernel/a reached 1.60x on val but its held-out check was not run: time budget spent "
            "(--budget-minutes 600.00)");
  EXPECT_EQ(notes[1], "1 candidate(s) never gated (1 compositions): time budget spent (--budget-minutes 600.00)");
}
