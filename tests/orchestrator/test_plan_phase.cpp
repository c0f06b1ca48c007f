// The --plan phase: the estimate of a run from a calibration, and plan.json's figures.
#include <gtest/gtest.h>

#include "orchestrator/phases/phases.h"
#include "run_state_fixture.h"

using namespace autooptim::orchestrator;
using autooptim::orchestrator::testing::RunStateTest;
using nlohmann::json;

namespace {

const json kCalibration = {
    {"worker_load_s", 10.0}, {"clip_estimate_s", 2.0}, {"forward_s", 0.5}, {"decode_s", 1.0}, {"text_s", 0.1}};

RunRequest plan_request() {
  RunRequest req;
  req.gate.timing_repeats = 2;
  req.gate.max_prompts = 0;
  req.screen_forwards = 3;
  req.budget_minutes = 10;
  req.budget_trials = 40;
  req.executor_trials = 8;
  req.workers = 1;
  return req;  // three families by default
}

}  // namespace

// Five prompts, two timed pairs (gates/gate_plan.h): 2 warm-ups + 4 pair clips + 5 split clips + the audit,
// the baseline check and the off run + 4 baseline outputs = 18 clips in the baseline's own gate; a candidate's
// gate finds those 4 in the cache: 14 clips, 28 s at the baseline's speed, 19 s at 2x (its 9 clips at 1 s).
TEST(PlanPhase, EstimateCountsTheGenerationsOfEachStep) {
  const PlanEstimate e = estimate_plan(plan_request(), kCalibration, 5);
  EXPECT_EQ(e.workers, 1);
  EXPECT_DOUBLE_EQ(e.baseline_gate_s, 36.0);
  EXPECT_DOUBLE_EQ(e.gate_s, 28.0);
  EXPECT_DOUBLE_EQ(e.gate_2x_s, 19.0);
  EXPECT_EQ(e.gate_generations, 14);
  EXPECT_DOUBLE_EQ(e.screen_s, 5.1);  // (2x3 + 4) forwards + the text
  EXPECT_DOUBLE_EQ(e.trial_s, 6.0);
  EXPECT_DOUBLE_EQ(e.exploration_s, 192.0);  // 3 families x 8 trials x 2 prompts x 2 clips x 2 s
  EXPECT_EQ(e.gates_fit, 10);                // (600 - 10 - 36 - 192) / 33.1
  EXPECT_DOUBLE_EQ(e.total_device_s, 10 + 36 + 192 + 10 * 33.1);
  EXPECT_DOUBLE_EQ(e.min_budget_s, 104.0);  // twice the load, the baseline gate and a trial
  EXPECT_TRUE(e.enough);
}

TEST(PlanPhase, ABudgetBelowOneCandidateSaysWhatItNeeds) {
  RunRequest req = plan_request();
  req.budget_minutes = 1;
  const PlanEstimate e = estimate_plan(req, kCalibration, 5);
  EXPECT_FALSE(e.enough);
  EXPECT_EQ(e.why.rfind("--budget-minutes 1.00 cannot gate one candidate: that needs about 1.73 minutes", 0), 0u)
      << e.why;
  req = plan_request();
  req.budget_trials = 1;
  EXPECT_FALSE(estimate_plan(req, kCalibration, 5).enough);
  req.budget_trials = 2;
  req.gpus = "0,1,2";
  EXPECT_EQ(estimate_plan(req, kCalibration, 5).workers, 3);
}

TEST_F(RunStateTest, PlanJsonHoldsTheEstimateAndTheBudget) {
  req_ = plan_request();
  req_.load.model = "wan22-tiny";
  req_.prompts_dir = std::string(AUTOOPTIM_SOURCE_DIR) + "/prompts";
  auto& s = state();
  const PlanEstimate e = estimate_plan(req_, kCalibration, 5);
  const json plan = plan_json(s, kCalibration, e);
  EXPECT_EQ(plan["model"], "wan22-tiny");
  EXPECT_EQ(plan["official_config"], true);
  EXPECT_EQ(plan["calibration"], kCalibration);
  EXPECT_EQ(plan["estimate"]["candidate_gates"], 10);
  EXPECT_DOUBLE_EQ(plan["estimate"]["gate_s"].get<double>(), 28.0);
  EXPECT_DOUBLE_EQ(plan["estimate"]["gate_2x_s"].get<double>(), 19.0);
  EXPECT_EQ(plan["estimate"]["gate_generations"], 14);
  EXPECT_DOUBLE_EQ(plan["estimate"]["min_budget_s"].get<double>(), 104.0);
  EXPECT_EQ(plan["estimate"].size(), 14u);
  EXPECT_EQ(plan["budget"], json({{"minutes", 10.0}, {"trials", 40}, {"executor_trials", 8}}));
  EXPECT_EQ(plan["enough"], true);
  EXPECT_EQ(plan["reason"], "");
}
