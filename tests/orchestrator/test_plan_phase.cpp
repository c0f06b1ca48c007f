// The --plan phase: the estimate of a run from a calibration, and plan.json's figures.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "gates/gate.h"
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

// Five prompts, at most two timed pairs (gates/gate_plan.h), one where the noise is measured otherwise: the
// baseline's own gate makes 2 warm-ups + 2 pair clips + 5 split clips + the audit = 10 clips (its split clips are
// the baseline's outputs, cached, and time the machine; no off run: it has no flag to turn off); a candidate's gate
// finds those in the cache and adds the off run: 11 clips, 22 s at the baseline's speed, 14 s at 2x (its 7 clips
// at 1 s, the baseline's warm-up, its pair run and the off run at 2 s).
TEST(PlanPhase, EstimateCountsTheGenerationsOfEachStep) {
  const PlanEstimate e = estimate_plan(plan_request(), kCalibration, 5);
  EXPECT_EQ(e.workers, 1);
  EXPECT_DOUBLE_EQ(e.baseline_gate_s, 20.0);
  EXPECT_DOUBLE_EQ(e.gate_s, 22.0);
  EXPECT_DOUBLE_EQ(e.gate_2x_s, 14.0);
  EXPECT_EQ(e.gate_generations, 11);
  EXPECT_DOUBLE_EQ(e.screen_s, 5.1);         // (2x3 + 4) forwards + the text
  EXPECT_DOUBLE_EQ(e.trial_s, 6.0);          // no step count known: the warm-up priced as a whole clip
  EXPECT_DOUBLE_EQ(e.exploration_s, 192.0);  // 3 families x 8 trials x 2 prompts x 2 clips x 2 s
  EXPECT_EQ(e.gates_fit, 13);                // (600 - 10 - 20 - 192) / 27.1
  EXPECT_DOUBLE_EQ(e.total_device_s, 10 + 20 + 192 + 13 * 27.1);
  // The exploration gets half of what the load and the baseline's gate leave: it must hold one trial, the rest
  // a trial, a screen and a gate.
  EXPECT_DOUBLE_EQ(e.min_budget_s, 10 + 20 + (6 + 5.1 + 22));
  EXPECT_DOUBLE_EQ(e.min_budget_cached_s, 10 + (6 + 5.1 + 22));
  EXPECT_DOUBLE_EQ(e.min_budget_2x_s, 10 + 20 + (6 + 5.1 + 14));
  EXPECT_DOUBLE_EQ(e.min_budget_2x_cached_s, 10 + (6 + 5.1 + 14));
  EXPECT_TRUE(e.enough);
}

// The exploration's deadline: half of what the budget has left when it begins, counted from the run's start.
TEST(PlanPhase, TheExplorationGetsHalfOfWhatTheBaselinesGateLeaves) {
  EXPECT_DOUBLE_EQ(exploration_deadline_s(600, 0), 300);
  EXPECT_DOUBLE_EQ(exploration_deadline_s(600, 200), 400);
  EXPECT_DOUBLE_EQ(exploration_deadline_s(600, 700), 700);  // the baseline's gate overran: no exploration
  RunRequest req = plan_request();
  req.budget_minutes = 1;  // 60 s: 10 s load + 20 s baseline gate leave 30 s, 15 for the exploration
  EXPECT_DOUBLE_EQ(estimate_plan(req, kCalibration, 5).exploration_s, 15.0);
}

// The official configuration of the 5B, priced from the calibration an H100 gave on 2026-12-06 (one clip
// 127.7 s: text 0.049 s, 50 steps of two 1.183 s forwards, a 9.355 s decode), at the run's gate settings (at
// most 3 pairs, one where the noise is measured otherwise; 2-step warm-ups of 14.14 s; the val split's 8
// prompts). The figures docs/gate-cost.md states: a candidate's gate 1560.7 s at 1x and 915.1 s at 2x, the
// baseline's 1433.0 s; the least budget 54.6 min (43.8 at 2x), 30.7 with the baseline's gate cached (20.0 at 2x).
// They were 1816.1, 1106.7 and 1816.1 s, 73.3 and 36.9 min with two pairs in every gate, an off run in the
// baseline's, whole-clip trial warm-ups and the exploration's half counted from the run's start.
TEST(PlanPhase, TheOfficialConfigurationAtTheH100sCalibration) {
  RunRequest req = plan_request();
  req.gate.timing_repeats = 3;
  req.budget_minutes = 480;
  const json cal = {{"worker_load_s", 0.4},
                    {"clip_estimate_s", 0.049 + 100 * 1.183 + 9.355},
                    {"forward_s", 1.183},
                    {"decode_s", 9.355},
                    {"text_s", 0.049}};
  const PlanEstimate e = estimate_plan(req, cal, 8, autooptim::gates::official_config("wan22-ti2v-5b"));
  const double clip = 127.704, warm = clip - 48 * 2 * 1.183;
  EXPECT_EQ(e.gate_generations, 14);  // 2 warm-ups, 1 pair, the off run, 8 split clips, the audit
  EXPECT_NEAR(e.gate_s, 2 * warm + 12 * clip, 1e-6);
  EXPECT_NEAR(e.gate_2x_s, warm + 2 * clip + (warm + 10 * clip) / 2, 1e-6);
  EXPECT_NEAR(e.baseline_gate_s, 2 * warm + 11 * clip, 1e-6);  // 1 pair, 8 split clips, the audit
  EXPECT_NEAR(e.trial_s, warm + 2 * clip, 1e-6);
  EXPECT_NEAR(e.gate_s, 1560.7, 0.1);
  EXPECT_NEAR(e.gate_2x_s, 915.1, 0.1);
  EXPECT_NEAR(e.min_budget_s / 60, 54.6, 0.1);
  EXPECT_NEAR(e.min_budget_2x_s / 60, 43.8, 0.1);
  EXPECT_NEAR(e.min_budget_cached_s / 60, 30.7, 0.1);
  EXPECT_NEAR(e.min_budget_2x_cached_s / 60, 20.0, 0.1);
  EXPECT_NEAR(e.exploration_s, 3 * 8 * 2 * 2 * clip, 1e-6);  // on a CPU: each trial's baseline run made afresh
  // On a GPU a trial's baseline run of a prompt is the worker's kept one: the exploration makes half the clips.
  req.load.precision.device = at::Device(at::kCUDA, 0);
  const PlanEstimate gpu = estimate_plan(req, cal, 8, autooptim::gates::official_config("wan22-ti2v-5b"));
  EXPECT_NEAR(gpu.exploration_s, 3 * 8 * 2 * clip, 1e-6);
  // Eight hours on one GPU: the candidates it gates at the baseline's speed, and at 2x (their trials at 2x too).
  EXPECT_EQ(gpu.gates_fit, 13);     // (28800 - 0.4 - 1433.0 - 6129.8) / (1560.7 + 11.9)
  EXPECT_EQ(gpu.gates_fit_2x, 26);  // (28800 - 0.4 - 1433.0 - 3064.9) / (915.1 + 11.9)
}

TEST(PlanPhase, ABudgetBelowOneCandidateSaysWhatItNeeds) {
  RunRequest req = plan_request();
  req.budget_minutes = 1;
  const PlanEstimate e = estimate_plan(req, kCalibration, 5);
  EXPECT_FALSE(e.enough);
  EXPECT_EQ(e.why.rfind("--budget-minutes 1.00 cannot gate one candidate: that needs about 1.05 minutes", 0), 0u)
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
  EXPECT_EQ(plan["estimate"]["candidate_gates"], 13);
  EXPECT_EQ(plan["estimate"]["candidate_gates_2x"], 22);  // (600 - 10 - 20 - 144) s / (14 + 5.1): trials at 2x
  EXPECT_DOUBLE_EQ(plan["estimate"]["gate_s"].get<double>(), 22.0);
  EXPECT_DOUBLE_EQ(plan["estimate"]["gate_2x_s"].get<double>(), 14.0);
  EXPECT_EQ(plan["estimate"]["gate_generations"], 11);
  EXPECT_DOUBLE_EQ(plan["estimate"]["min_budget_s"].get<double>(), 63.1);
  EXPECT_DOUBLE_EQ(plan["estimate"]["min_budget_cached_s"].get<double>(), 43.1);
  EXPECT_DOUBLE_EQ(plan["estimate"]["min_budget_2x_s"].get<double>(), 55.1);
  EXPECT_DOUBLE_EQ(plan["estimate"]["min_budget_2x_cached_s"].get<double>(), 35.1);
  EXPECT_EQ(plan["estimate"].size(), 18u);
  EXPECT_EQ(plan["budget"], json({{"minutes", 10.0}, {"trials", 40}, {"executor_trials", 8}}));
  EXPECT_EQ(plan["enough"], true);
  EXPECT_EQ(plan["reason"], "");
}

// Issue 37: on a GPU the baseline's outputs and verdict are kept for every later run of the machine (the
// baseline's own gate at the official configuration costs most of an hour); on a CPU, the run's own folder.
TEST(BaselineCacheDefault, AGpuRunSharesTheMachinesCacheACpuRunKeepsItsOwn) {
  const std::filesystem::path out = "/runs/a";
  std::map<std::string, std::string> vars = {{"HOME", "/home/u"}};
  auto env = [&](const char* k) -> const char* {
    const auto it = vars.find(k);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(default_baseline_cache(out, "cpu", env), "/runs/a/baseline-cache");
  EXPECT_EQ(default_baseline_cache(out, "cuda", env), "/home/u/.cache/autooptim/baseline-cache");
  vars["XDG_CACHE_HOME"] = "/xdg";
  EXPECT_EQ(default_baseline_cache(out, "cuda", env), "/xdg/autooptim/baseline-cache");
  vars["AUTOOPTIM_CACHE_DIR"] = "/fast";
  EXPECT_EQ(default_baseline_cache(out, "cuda", env), "/fast/baseline-cache");
  vars.clear();
  EXPECT_EQ(default_baseline_cache(out, "cuda", env), "/runs/a/baseline-cache");  // no home: the run's own
}
