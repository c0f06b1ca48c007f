// The job queue's decisions that need no worker: whether a gate may start under the budgets and the
// reserve kept for the held-out checks, what a screen drops, and the order candidates are gated in.
#include <gtest/gtest.h>

#include "orchestrator/phases/phases.h"
#include "workers/messages.h"
#include "run_state_fixture.h"

using namespace autooptim;
using namespace autooptim::orchestrator;
using nlohmann::json;
using orchestrator::testing::candidate;
using orchestrator::testing::RunStateTest;
using orchestrator::testing::verdict;

namespace {

Job job(const std::string& phase) {
  Job j;
  j.phase = phase;
  return j;
}

// An accepted verdict on the split, as the ledger holds it.
json split_verdict(const std::string& hash, double speedup, double psnr) {
  json v = verdict(true, speedup, psnr);
  v["manifest_hash"] = hash;
  return v;
}

}  // namespace

TEST_F(RunStateTest, AGateStartsOnlyWithinTheGateRunBudget) {
  req_.budget_trials = 3;
  auto& s = state();
  EXPECT_EQ(why_not_gate(s, job("gate"), 1), "");
  s.gate_runs = 3;
  EXPECT_EQ(why_not_gate(s, job("gate"), 1), "gate-run budget spent (3 of --budget-trials)");
  EXPECT_EQ(why_not_gate(s, job("heldout"), 1), "gate-run budget spent (3 of --budget-trials)");
}

// A tier winner without a held-out verdict keeps one gate run: candidates stop one run earlier, the
// held-out check and the baseline still start; once confirmed, nothing is kept.
TEST_F(RunStateTest, TheHeldOutChecksOfTierWinnersKeepTheirGateRuns) {
  req_.budget_trials = 3;
  auto& s = state();
  s.done[{"h1", req_.split}] = split_verdict("h1", 2.0, 40);
  s.done[{"h2", req_.split}] = verdict(false, 3.0, 50);  // rejected: wins nothing
  EXPECT_EQ(reserve_runs(s), 1);
  s.gate_runs = 2;
  EXPECT_EQ(why_not_gate(s, job("gate"), 1),
            "gate-run budget spent (3 of --budget-trials; the rest, 1, is kept for the held-out checks of the tier "
            "candidates)");
  EXPECT_EQ(why_not_gate(s, job("compose"), 1), why_not_gate(s, job("gate"), 1));
  EXPECT_EQ(why_not_gate(s, job("heldout"), 1), "");
  EXPECT_EQ(why_not_gate(s, job("baseline"), 1), "");
  s.done[{"h1", req_.heldout_split}] = verdict(true, 2.0, 40);
  EXPECT_EQ(reserve_runs(s), 0);
  EXPECT_EQ(why_not_gate(s, job("gate"), 1), "");
}

// The time kept: the mean gate run so far, priced up by the held-out split's generations, with a quarter
// for noise, per winner, spread over the workers.
TEST_F(RunStateTest, TheTimeReserveIsPricedByTheHeldOutGatesGenerations) {
  req_.gate.timing_repeats = 1;
  auto& s = state();
  s.split_used = 2;                                         // 2 + 2 + 3 + 4 - 1 = 10 generations
  s.heldout_used = 16;                                      // 2 + 2 + 3 + 32 - 1 = 38
  s.done[{"a", req_.split}] = split_verdict("a", 1.6, 40);  // wins 1.5x (better quality)
  s.done[{"b", req_.split}] = split_verdict("b", 3.0, 30);  // wins 2x and 3x
  EXPECT_EQ(reserve_s(s, 1), 0.0);                          // no gate finished: nothing to price it by
  s.gates_finished = 2;
  s.gating_s = 20;
  EXPECT_DOUBLE_EQ(reserve_s(s, 1), 1.25 * 3.8 * 10 * 2);
  EXPECT_DOUBLE_EQ(reserve_s(s, 2), 1.25 * 3.8 * 10);
  s.done[{"b", req_.heldout_split}] = verdict(true, 3.0, 30);
  EXPECT_DOUBLE_EQ(reserve_s(s, 1), 1.25 * 3.8 * 10);
}

TEST_F(RunStateTest, ASpentTimeBudgetStopsEveryGate) {
  req_.budget_minutes = 1e-9;
  auto& s = state();
  EXPECT_EQ(why_not_gate(s, job("heldout"), 1), "time budget spent (--budget-minutes 0.00)");
}

TEST_F(RunStateTest, AScreenDropsWhatCannotReachTheSmallestTierEvenWithTheSlack) {
  req_.screen_slack = 0.1;
  auto& s = state();
  s.screen_min = 1.5;
  auto screen = [](double estimate) {
    workers::ScreenResult r;
    r.base_estimate_s = 10.0;
    r.cand_estimate_s = 10.0 / estimate;
    r.estimated_speedup = estimate;
    return json{{"ok", true}, {"result", r.to_json()}};
  };
  const json low = judge_screen(s, screen(1.3));
  EXPECT_TRUE(low["dropped"].get<bool>());  // 1.3 x 1.1 < 1.5
  EXPECT_DOUBLE_EQ(low["min_speedup"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(low["slack"].get<double>(), 0.1);
  EXPECT_FALSE(judge_screen(s, screen(1.4))["dropped"].get<bool>());
  const json failed = judge_screen(s, {{"ok", false}, {"error", "out of memory"}});
  EXPECT_FALSE(failed["dropped"].get<bool>());  // a failed screen decides nothing
  EXPECT_EQ(failed["error"], "out of memory");
  // A result that is not the typed message decides nothing either, and says which key is wrong.
  const json partial = judge_screen(s, {{"ok", true}, {"result", {{"estimated_speedup", 1.3}}}});
  EXPECT_FALSE(partial["dropped"].get<bool>());
  EXPECT_NE(partial["error"].get<std::string>().find("missing key"), std::string::npos) << partial.dump();
  EXPECT_FALSE(judge_screen(s, {{"ok", true}, {"result", json::object()}})["dropped"].get<bool>());
}

// Each family's first proposal, then each one's second, ...; the first round holds at least one per worker.
TEST_F(RunStateTest, CandidatesAreGatedRoundRobinAcrossFamilies) {
  auto& s = state();
  const json kernel = {{"cross_kv_cache", true}}, cache = {{"easycache", {{"enabled", true}}}};
  std::vector<Candidate> cands = {
      candidate(s.base, "kernel", "k1", kernel, nullptr),
      candidate(s.base, "kernel", "k2", {{"fused_qkv", true}}, nullptr),
      candidate(s.base, "kernel", "k3", {{"timestep_dedup", true}}, nullptr),
      candidate(s.base, "cache", "c1", cache, nullptr),
      candidate(s.base, "cache", "c2", {{"easycache", {{"enabled", true}, {"threshold", 0.05}}}}, nullptr),
      candidate(s.base, "sparse", "s1", {{"sparse", {{"pattern", "frame_window"}}}}, nullptr)};
  auto ordered = cands;
  EXPECT_EQ(order_round_robin(ordered, 1), 3u);
  std::vector<std::string> names;
  for (const auto& c : ordered) names.push_back(c.m.id.substr(c.m.id.rfind('/') + 1));
  EXPECT_EQ(names, (std::vector<std::string>{"c1", "k1", "s1", "c2", "k2", "k3"}));
  ordered = cands;
  EXPECT_EQ(order_round_robin(ordered, 5), 5u);
  ordered = cands;
  EXPECT_EQ(order_round_robin(ordered, 9), 6u);
}
