// The gate's plan of generations (gates/gate_plan.h): what `run --plan` prices and the gate's progress
// counts. Harness test Gate.ARunsWindowsAreItsPlan holds a real gate run against it.
#include <gtest/gtest.h>

#include "gates/gate_plan.h"

namespace autooptim::test {
using namespace autooptim::gates;

namespace {

std::vector<std::string> roles(const std::vector<PlannedGeneration>& plan, bool conditional) {
  std::vector<std::string> r;
  for (const auto& g : plan)
    if (g.conditional == conditional && !g.cached) r.push_back(g.role);
  return r;
}

GateSettings two_pairs() {
  GateSettings S;
  S.timing_repeats = 2;
  S.pairs_from_history = false;
  return S;
}

}  // namespace

TEST(GatePlan, ListsTheGenerationsInTheOrderTheGateMakesThem) {
  const auto plan = plan_gate_generations({"a", "b", "c"}, two_pairs());
  EXPECT_EQ(roles(plan, false),
            std::vector<std::string>({"warmup_baseline", "warmup_candidate", "candidate", "baseline", "candidate",
                                      "baseline", "off", "candidate_split", "candidate_split", "candidate_split",
                                      "audit", "baseline_split", "baseline_split", "baseline_split"}));
  EXPECT_EQ(roles(plan, true), std::vector<std::string>({"recheck_fresh", "recheck_seen", "precision_control"}));
  EXPECT_EQ(generations_made(plan), 14);
  EXPECT_EQ(plan[6].side, "off");  // right after the pairs' last baseline run, timed in the state theirs were
  EXPECT_EQ(plan[7].prompt, "a @ official seed");
  EXPECT_EQ(plan[11].prompt, "a @ official seed");
  EXPECT_TRUE(plan[11].cacheable);
  for (const auto& g : plan) EXPECT_FALSE(g.serves.empty()) << g.role;
}

// Issue 37: the off run is held against the cached output; a fresh baseline run of it (the spot-check) is made
// only in a worker process's first gate on that cache, so it is conditional.
TEST(GatePlan, CachedBaselineOutputsAreNotMadeNorPriced) {
  const auto plan = plan_gate_generations({"a", "b", "c"}, two_pairs(), {true, true, false});
  EXPECT_EQ(generations_made(plan), 12);  // a's and b's outputs cached
  EXPECT_EQ(roles(plan, true),
            std::vector<std::string>({"baseline_check", "recheck_fresh", "recheck_seen", "precision_control"}));
  double at1 = 0, at2 = 0;
  for (const auto& g : plan) {
    at1 += planned_seconds(g, ClipCost{10.0, 0.0, 0}, 1.0);  // steps unknown: a warm-up is a whole clip
    at2 += planned_seconds(g, ClipCost{10.0, 0.0, 0}, 2.0);
  }
  EXPECT_DOUBLE_EQ(at1, 120.0);
  // At the baseline's speed: its warm-up, 2 pair baselines, the off run, c's output = 5 x 10;
  // the candidate's: its warm-up, 2 pairs, 3 split clips, the audit = 7 x 5.
  EXPECT_DOUBLE_EQ(at2, 50.0 + 35.0);
}

// The baseline's own gate: its split clips are the baseline's outputs, so it makes none twice; and it has no
// technique flag to turn off, so no off run (it would be its first split clip again).
TEST(GatePlan, TheBaselinesOwnGateMakesNoBaselineOutputTwice) {
  const auto plan = plan_gate_generations({"a", "b", "c"}, two_pairs(), {}, true);
  EXPECT_EQ(roles(plan, false),
            std::vector<std::string>({"warmup_baseline", "warmup_candidate", "candidate", "baseline", "candidate",
                                      "baseline", "candidate_split", "candidate_split", "candidate_split", "audit"}));
  EXPECT_NE(plan[6].serves.find("cached"), std::string::npos) << plan[6].serves;
  // With the outputs cached (an earlier run) it still makes them: they are its split, checked against the cache.
  EXPECT_EQ(generations_made(plan_gate_generations({"a", "b", "c"}, two_pairs(), {true, true, true}, true)), 10);
}

// Issue 37: one pair where the machine's noise is measured otherwise. The baseline's own gate times its split
// clips (the baseline's outputs, at one shape); a candidate's gate after it in the worker process holds its one
// baseline run against the runs there. The second pair is made only where they do not vouch.
TEST(GatePlan, OnePairWhereTheNoiseIsMeasuredOtherwise) {
  GateSettings S;
  S.timing_repeats = 3;
  const auto cand = plan_gate_generations({"a", "b"}, S, {true, true});
  EXPECT_EQ(roles(cand, false),
            std::vector<std::string>({"warmup_baseline", "warmup_candidate", "candidate", "baseline", "off",
                                      "candidate_split", "candidate_split", "audit"}));
  EXPECT_EQ(cand[4].role, "candidate");
  EXPECT_TRUE(cand[4].conditional);
  EXPECT_NE(cand[4].serves.find("earlier gates did not measure the noise"), std::string::npos) << cand[4].serves;
  EXPECT_NE(cand[6].serves.find("not quiet"), std::string::npos) << cand[6].serves;  // the third pair
  const auto base = plan_gate_generations({"a", "b"}, S, {}, true);
  EXPECT_EQ(generations_made(base), 7);  // 2 warm-ups, 1 pair, 2 split clips, the audit
  // One prompt cannot measure the noise: the baseline's gate makes the quiet minimum of pairs.
  EXPECT_EQ(generations_made(plan_gate_generations({"a"}, S, {}, true)), 8);
  S.pairs_from_history = false;  // --full-gate
  EXPECT_EQ(generations_made(plan_gate_generations({"a", "b"}, S, {true, true})), 10);
}

// Pairs beyond the quiet minimum are made only while the timings are not quiet; the warm-ups run a few
// steps, and are priced by the steps they leave out.
TEST(GatePlan, ExtraPairsAreConditionalAndWarmUpsArePricedByTheirSteps) {
  GateSettings S = two_pairs();
  S.timing_repeats = 3;
  S.warmup_steps = 2;
  const auto plan = plan_gate_generations({"a"}, S, {});
  EXPECT_EQ(roles(plan, true),
            std::vector<std::string>({"candidate", "baseline", "recheck_fresh", "recheck_seen", "precision_control"}));
  EXPECT_EQ(plan[0].steps, 2);
  EXPECT_EQ(plan[1].steps, 2);
  const ClipCost cost{55.0, 1.0, 50};  // 50 steps of 1 s, 5 s besides: a 2-step warm-up costs 7 s
  EXPECT_DOUBLE_EQ(planned_seconds(plan[0], cost, 1.0), 7.0);
  EXPECT_DOUBLE_EQ(planned_seconds(plan[1], cost, 2.0), 3.5);
  EXPECT_DOUBLE_EQ(planned_seconds(plan[2], cost, 2.0), 27.5);  // the first pair's candidate: a whole clip at 2x
  EXPECT_DOUBLE_EQ(planned_seconds(plan[6], cost, 1.0), 0.0);   // the third pair: conditional
}

}  // namespace autooptim::test
