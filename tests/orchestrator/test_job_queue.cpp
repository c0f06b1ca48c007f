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
using orchestrator::testing::record;
using orchestrator::testing::RunStateTest;
using orchestrator::testing::verdict;

namespace {

Job job(const std::string& phase) {
  Job j;
  j.phase = phase;
  return j;
}

// An accepted verdict on the split, as the ledger holds it.
GateRecord split_verdict(const std::string& hash, double speedup, double psnr) {
  return record(true, speedup, psnr, "", hash);
}

// A worker's answer to a screen request: ok with `result`, or failed with `error`.
workers::Response answer(bool ok, const json& result, const std::string& error = "") {
  workers::Response r;
  r.id = "orchestrator-1-1-abcdef";
  r.kind = "screen";
  r.worker = "cpu0";
  r.ok = ok;
  r.result = result;
  r.error = error;
  return r;
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
  s.done[{"h2", req_.split}] = record(false, 3.0, 50, "", "h2");  // rejected: wins nothing
  EXPECT_EQ(reserve_runs(s), 1);
  s.gate_runs = 2;
  EXPECT_EQ(why_not_gate(s, job("gate"), 1),
            "gate-run budget spent (3 of --budget-trials; the rest, 1, is kept for the held-out checks of the tier "
            "candidates)");
  EXPECT_EQ(why_not_gate(s, job("compose"), 1), why_not_gate(s, job("gate"), 1));
  EXPECT_EQ(why_not_gate(s, job("heldout"), 1), "");
  EXPECT_EQ(why_not_gate(s, job("baseline"), 1), "");
  s.done[{"h1", req_.heldout_split}] = record(true, 2.0, 40, "", "h1", req_.heldout_split);
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
  s.done[{"b", req_.heldout_split}] = record(true, 3.0, 30, "", "b", req_.heldout_split);
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
    return answer(true, r.to_json());
  };
  const json low = judge_screen(s, screen(1.3));
  EXPECT_TRUE(low["dropped"].get<bool>());  // 1.3 x 1.1 < 1.5
  EXPECT_DOUBLE_EQ(low["min_speedup"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(low["slack"].get<double>(), 0.1);
  EXPECT_FALSE(judge_screen(s, screen(1.4))["dropped"].get<bool>());
  const json failed = judge_screen(s, answer(false, json::object(), "out of memory"));
  EXPECT_FALSE(failed["dropped"].get<bool>());  // a failed screen decides nothing
  EXPECT_EQ(failed["error"], "out of memory");
  // A result that is not the typed message decides nothing either, and says which key is wrong.
  const json partial = judge_screen(s, answer(true, {{"estimated_speedup", 1.3}}));
  EXPECT_FALSE(partial["dropped"].get<bool>());
  EXPECT_NE(partial["error"].get<std::string>().find("missing key"), std::string::npos) << partial.dump();
  EXPECT_FALSE(judge_screen(s, answer(true, json::object()))["dropped"].get<bool>());
}

// The answer to a gate request is read once, as the typed verdict: a worker's verdict is kept as it came; a
// failed request, or a verdict that does not fit the message, rejects the candidate as one that could not run,
// with the reason (the missing key named), in the could-not-run layout the ledger and the report keep.
TEST_F(RunStateTest, AGateAnswerIsReadOnceAsTheTypedVerdict) {
  auto& s = state();
  Job j = job("gate");
  j.m = s.base;
  j.hash = "h1";
  j.split = req_.split;
  workers::GateVerdictResult v;
  v.manifest = s.base.id;
  v.manifest_hash = "h1";
  v.split = req_.split;
  v.accepted = true;
  v.speedup = 1.8;
  v.psnr = 42.0;
  v.gates["performance"] = {true, "", json::object()};
  const GateAnswer ran = gate_answer(j, answer(true, v.to_json()));
  EXPECT_TRUE(ran.ran);
  EXPECT_TRUE(ran.verdict.accepted);
  EXPECT_DOUBLE_EQ(ran.verdict.speedup, 1.8);
  EXPECT_EQ(ran.row.dump(), v.to_json().dump());

  const GateAnswer failed = gate_answer(j, answer(false, json::object(), "out of memory"));
  EXPECT_FALSE(failed.ran);
  EXPECT_FALSE(failed.verdict.accepted);
  EXPECT_EQ(failed.row.dump(), json({{"manifest", s.base.id},
                                     {"manifest_hash", "h1"},
                                     {"split", req_.split},
                                     {"accepted", false},
                                     {"speedup", 0.0},
                                     {"psnr", 0.0},
                                     {"ssim", 0.0},
                                     {"failure_signature", "could-not-run"},
                                     {"gates", {{"artifacts", {{"pass", false}, {"reason", "out of memory"}}}}}})
                                   .dump());

  json no_speedup = v.to_json();
  no_speedup.erase("speedup");
  const GateAnswer malformed = gate_answer(j, answer(true, no_speedup));
  EXPECT_FALSE(malformed.ran);
  EXPECT_FALSE(malformed.verdict.accepted);  // never the worker's "accepted": true
  EXPECT_EQ(malformed.row["gates"]["artifacts"]["reason"],
            "the worker's verdict is malformed: gate verdict: missing key 'speedup'");
}

// A response file that does not fit the typed message fails its job with the key named, rather than reading
// as a silent 0 s, not cancelled; a well-formed one reads as written.
TEST_F(RunStateTest, AResponseIsReadAsTheTypedMessage) {
  workers::Response cancelled = answer(false, json::object(), "cancelled by its client");
  cancelled.cancelled = true;
  cancelled.counters = workers::Response::Counters{2.5, 2.0, 1, 1000};
  const workers::Response read = response_of(cancelled.to_json(), "req-1");
  EXPECT_TRUE(read.cancelled);
  EXPECT_FALSE(read.ok);
  EXPECT_DOUBLE_EQ(read.busy_s(), 2.5);
  EXPECT_EQ(read.worker, "cpu0");

  json wire = cancelled.to_json();
  wire.erase("cancelled");
  const workers::Response missing = response_of(wire, "req-1");
  EXPECT_FALSE(missing.ok);
  EXPECT_FALSE(missing.cancelled);
  EXPECT_EQ(missing.error, "the worker's response is malformed: response to req-1: missing key 'cancelled'");
  wire["cancelled"] = "yes";
  EXPECT_EQ(response_of(wire, "req-1").error,
            "the worker's response is malformed: response to req-1: key 'cancelled': expected true or false, got "
            "\"yes\"");
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
