// The cache family's policies: each one's skip decisions on a scripted sequence of inputs, per CFG
// branch, the residual it reuses when it skips, its calibration records; then each on the tiny model
// through the pipeline, engaged as the harness checks it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "runtime/models.h"
#include "runtime/techniques/cache/cache_policy.h"
#include "runtime/techniques/cache/easycache.h"
#include "runtime/techniques/cache/first_block_cache.h"
#include "runtime/techniques/cache/forced_skip.h"
#include "runtime/techniques/cache/magcache.h"
#include "runtime/techniques/cache/taylorseer.h"
#include "runtime/techniques/cache/teacache.h"
#include "runtime/techniques/engagement.h"
#include "runtime/techniques/registry.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::runtime::techniques {
namespace {

at::Tensor filled(double v) { return at::full({1, 2, 4}, v, at::kFloat); }  // [B, L, D]

// Scripted values -> tensors whose relative L1 change from one to the next is changes[t].
std::vector<at::Tensor> with_changes(const std::vector<double>& changes) {
  std::vector<at::Tensor> out{filled(1.0)};
  double v = 1.0;
  for (double c : changes) out.push_back(filled(v *= 1 + c));
  return out;
}

// Steps skipped by `branch`, from the policy's decisions.
std::set<int64_t> skipped(const CachePolicy& p, int branch) {
  std::set<int64_t> s;
  for (const auto& d : p.decisions())
    if (d.branch == branch && d.skipped) s.insert(d.step);
  return s;
}

// A stack of `layers` blocks, block i adding add[i] (or the scripted first residual for block 0 when
// set), with a scripted modulated input; counts the runs of each block.
struct ScriptedStack {
  int64_t layers = 3;
  std::vector<at::Tensor> modulated;  // returned by modulated_input, in call order
  std::vector<at::Tensor> first;      // block 0's residual, in call order (else + 1)
  size_t mod_calls = 0, first_calls = 0;
  std::map<int64_t, int> runs;

  BlockStack stack() {
    BlockStack s;
    s.layers = layers;
    s.block = [this](int64_t i, const at::Tensor& h) {
      ++runs[i];
      if (i == 0 && !first.empty()) return h + first.at(first_calls++);
      return h + 1.0;
    };
    s.modulated_input = [this](const at::Tensor&) { return modulated.at(mod_calls++); };
    return s;
  }
};

TEST(CachePolicies, TeaCacheAccumulatesTheRescaledChangePerBranch) {
  TeaCacheOptions o;
  o.enabled = true;
  o.threshold = 0.25;
  o.warmup_steps = 1;
  o.dense_last_step = true;
  Trace trace;
  TeaCache tea(o, 8, &trace);
  ScriptedStack cond, uncond;
  cond.modulated = with_changes({0.1, 0.1, 0.1, 0.02, 0.02, 0.3, 0.01});
  uncond.modulated = with_changes({0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3});
  const BlockStack sc = cond.stack(), su = uncond.stack();
  for (int64_t step = 0; step < 8; ++step) {
    const at::Tensor h = filled(10.0 * step);
    const at::Tensor out = tea.blocks(sc, h, step, 0);
    // Computed or reused, the stack adds its residual of 3 (three blocks of + 1).
    EXPECT_TRUE(at::allclose(out, h + 3.0)) << step;
    tea.blocks(su, h, step, 1);
  }
  // 0 warm-up; 1, 2 accumulate 0.1, 0.2; 3 reaches 0.3 and computes; 4, 5 accumulate 0.02, 0.04; 6 jumps; 7 is the
  // last.
  EXPECT_EQ(skipped(tea, 0), (std::set<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(skipped(tea, 1), std::set<int64_t>{});  // its own changes, its own decisions
  EXPECT_EQ(cond.runs[0], 4);
  EXPECT_EQ(uncond.runs[0], 8);
  EXPECT_EQ(trace.get("cache.teacache.skipped_forwards"), 4);
  EXPECT_EQ(trace.get("cache.teacache.computed_forwards"), 12);
  EXPECT_DOUBLE_EQ(trace.get("cache.skip_ratio"), 4.0 / 16.0);

  // The polynomial rescales the change before it accumulates: half of it delays the recomputation.
  o.coefficients = {0.0, 0.5};
  TeaCache half(o, 8, nullptr);
  ScriptedStack again;
  again.modulated = with_changes({0.1, 0.1, 0.1, 0.02, 0.02, 0.3, 0.01});
  const BlockStack sa = again.stack();
  for (int64_t step = 0; step < 8; ++step) half.blocks(sa, filled(1.0), step, 0);
  EXPECT_EQ(skipped(half, 0), (std::set<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_DOUBLE_EQ(half.estimate(0.1), 0.05);
  o.coefficients = {-1.0, 1.0};
  EXPECT_EQ(TeaCache(o, 8, nullptr).estimate(0.1), 0.0) << "a negative estimate counts as no change";
}

TEST(CachePolicies, TeaCacheCalibrationComputesEveryStepAndRecordsPairs) {
  TeaCacheOptions o;
  o.calibrate = true;
  o.threshold = 10;
  o.warmup_steps = 0;
  Trace trace;
  TeaCache tea(o, 5, &trace);
  ScriptedStack s;
  s.modulated = with_changes({0.1, 0.2, 0.3, 0.4});
  s.first = {filled(1), filled(2), filled(4), filled(8), filled(16)};
  const BlockStack st = s.stack();
  for (int64_t step = 0; step < 5; ++step) tea.blocks(st, filled(0.0), step, 0);
  EXPECT_TRUE(skipped(tea, 0).empty());
  // Input changes as scripted; output (h + first + 2) changes 3->4->6->10->18.
  EXPECT_NEAR(trace.get("cache.teacache.calibration.input.0.0001"), 0.1, 1e-6);
  EXPECT_NEAR(trace.get("cache.teacache.calibration.input.0.0004"), 0.4, 1e-6);
  EXPECT_NEAR(trace.get("cache.teacache.calibration.output.0.0001"), 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(trace.get("cache.teacache.calibration.output.0.0004"), 8.0 / 10.0, 1e-6);
  EXPECT_FALSE(trace.has("cache.teacache.calibration.input.0.0000"));
}

TEST(CachePolicies, MagCacheSkipsWhileTheCalibratedErrorAndTheSkipCountAllow) {
  MagCacheOptions o;
  o.enabled = true;
  o.threshold = 0.1;
  o.max_skips = 2;
  o.warmup_steps = 2;
  o.ratios = {1, 1, 0.99, 0.99, 0.99, 0.85, 0.99, 0.99, 0.99, 0.99};
  o.ratios_uncond = {1, 1, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8};
  Trace trace;
  MagCache mag(o, 10, &trace);
  ScriptedStack cond, uncond;
  const BlockStack sc = cond.stack(), su = uncond.stack();
  for (int64_t step = 0; step < 10; ++step) {
    const at::Tensor h = filled(step);
    EXPECT_TRUE(at::allclose(mag.blocks(sc, h, step, 0), h + 3.0));
    mag.blocks(su, h, step, 1);
  }
  // 0, 1 warm-up; 2, 3 skip (error 0.01, 0.03); 4 would be a third skip in a row; 5's ratio alone
  // errs 0.15; 6, 7 skip; 8 is a third again; 9 is the last.
  EXPECT_EQ(skipped(mag, 0), (std::set<int64_t>{2, 3, 6, 7}));
  EXPECT_EQ(skipped(mag, 1), std::set<int64_t>{});  // its own schedule: 0.8 errs 0.2 at once
  EXPECT_EQ(cond.runs[0], 6);
  EXPECT_DOUBLE_EQ(trace.get("cache.skip_ratio"), 4.0 / 20.0);

  // A schedule of another length is read at the nearest relative position; no unconditional
  // schedule means the conditional one.
  o.ratios = {1.0, 0.9, 0.8, 0.7, 0.6};
  o.ratios_uncond.clear();
  const MagCache five(o, 10, nullptr);
  EXPECT_DOUBLE_EQ(five.ratio(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(five.ratio(0, 5), 0.8);  // 5 * 4 / 9 = 2.2
  EXPECT_DOUBLE_EQ(five.ratio(1, 9), 0.6);
}

TEST(CachePolicies, MagCacheCalibrationRecordsTheMagnitudeRatios) {
  MagCacheOptions o;
  o.calibrate = true;
  Trace trace;
  MagCache mag(o, 4, &trace);
  for (int branch : {0, 1}) {
    ScriptedStack s;
    s.layers = 1;
    s.first = branch == 0 ? std::vector<at::Tensor>{filled(4), filled(2), filled(1.5), filled(1.2)}
                          : std::vector<at::Tensor>{filled(1), filled(1), filled(0.5), filled(0.5)};
    const BlockStack st = s.stack();
    for (int64_t step = 0; step < 4; ++step) mag.blocks(st, filled(0), step, branch);
  }
  EXPECT_TRUE(skipped(mag, 0).empty() && skipped(mag, 1).empty());
  EXPECT_NEAR(trace.get("cache.magcache.calibration.ratio.0.0001"), 0.5, 1e-6);
  EXPECT_NEAR(trace.get("cache.magcache.calibration.ratio.0.0003"), 0.8, 1e-6);
  const auto fitted = find("magcache")->calibration->fit({trace})["magcache"];
  const auto r = fitted["ratios"].get<std::vector<double>>();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_NEAR(r[0], 1.0, 1e-6);
  EXPECT_NEAR(r[2], 0.75, 1e-6);
  const auto u = fitted["ratios_uncond"].get<std::vector<double>>();
  ASSERT_EQ(u.size(), 4u);
  EXPECT_NEAR(u[2], 0.5, 1e-6);
}

TEST(CachePolicies, FirstBlockCacheComparesBlockZerosResidualWithTheLastComputation) {
  FirstBlockCacheOptions o;
  o.enabled = true;
  o.threshold = 0.2;
  o.warmup_steps = 1;
  o.dense_last_step = true;
  Trace trace;
  FirstBlockCache fb(o, 6, &trace);
  ScriptedStack cond, uncond;
  cond.first = {filled(1.0), filled(1.1), filled(1.15), filled(1.3), filled(1.35), filled(1.0)};
  uncond.first = {filled(1), filled(2), filled(4), filled(8), filled(16), filled(32)};
  const BlockStack sc = cond.stack(), su = uncond.stack();
  for (int64_t step = 0; step < 6; ++step) {
    const at::Tensor h = filled(step);
    const at::Tensor out = fb.blocks(sc, h, step, 0);
    // Block 0 always runs on h; blocks 1 and 2 add 2, computed or reused.
    EXPECT_TRUE(at::allclose(out, h + cond.first[static_cast<size_t>(step)] + 2.0)) << step;
    fb.blocks(su, h, step, 1);
  }
  // 1.1 and 1.15 are within 20% of 1.0 (the last computation's), 1.3 is not; 1.35 is within 20% of 1.3.
  EXPECT_EQ(skipped(fb, 0), (std::set<int64_t>{1, 2, 4}));
  EXPECT_EQ(skipped(fb, 1), std::set<int64_t>{});
  EXPECT_EQ(cond.runs[0], 6);
  EXPECT_EQ(cond.runs[1], 3);
  EXPECT_EQ(cond.runs[2], 3);
  EXPECT_EQ(uncond.runs[1], 6);
  EXPECT_EQ(trace.get("cache.first_block_cache.skipped_forwards"), 3);
}

TEST(CachePolicies, ForcedSkipSkipsTheListedStepsOfEveryBranch) {
  ForcedSkipOptions o;
  o.steps = {0, 2, 3, 7};
  Trace trace;
  ForcedSkip fs(o, 8, &trace);
  int calls = 0;
  for (int64_t step = 0; step < 8; ++step)
    for (int branch : {0, 1}) {
      const at::Tensor x = filled(step + branch);
      const at::Tensor v = fs.forward(step, branch, x, [&] {
        ++calls;
        return x * 2 + branch;  // residual x + branch
      });
      if (step == 3 && branch == 1) EXPECT_TRUE(at::allclose(v, x + (1.0 + 1) + 1));  // x + the residual of step 1
    }
  // Step 0 is listed but has no residual to reuse yet.
  EXPECT_EQ(skipped(fs, 0), (std::set<int64_t>{2, 3, 7}));
  EXPECT_EQ(skipped(fs, 1), (std::set<int64_t>{2, 3, 7}));
  EXPECT_EQ(calls, 10);
  EXPECT_DOUBLE_EQ(trace.get("cache.skip_ratio"), 6.0 / 16.0);
}

TEST(CachePolicies, EasyCacheConditionalBranchDecidesForBoth) {
  EasyCacheOptions o;
  o.enabled = true;
  o.threshold = 0.035;
  o.warmup_steps = 2;
  o.dense_last_step = true;
  EasyCache ec(o, 10, nullptr);
  for (int64_t step = 0; step < 10; ++step)
    for (int branch : {0, 1}) {
      const at::Tensor x = filled(1.0 + 0.01 * step);
      ec.forward(step, branch, x, [&] { return x * 2; });
    }
  const auto s = skipped(ec, 0);
  EXPECT_EQ(skipped(ec, 1), s);
  EXPECT_FALSE(s.empty());
  EXPECT_FALSE(s.count(0) || s.count(1) || s.count(9));
}

// Order 1: a skipped step extrapolates the residual (output - input) linearly from the branch's last two
// full computations; order 0 reuses the last one. A residual that grows by 0.5 per step is followed exactly.
TEST(CachePolicies, EasyCacheOrderOneForecastsTheResidualLinearly) {
  for (const int64_t order : {0, 1}) {
    SCOPED_TRACE(order);
    EasyCacheOptions o;
    o.enabled = true;
    o.threshold = 1.0;  // skip whenever allowed after the warm-up
    o.warmup_steps = 3;
    o.dense_last_step = true;
    o.order = order;
    Trace trace;
    EasyCache ec(o, 8, &trace);
    std::map<int64_t, double> got;
    for (int64_t step = 0; step < 8; ++step)
      for (int branch : {0, 1}) {
        const at::Tensor x = filled(1.0 + 0.01 * step);
        // residual of the branch at this step: (branch + 1) * (1 + 0.5 step)
        const double res = (branch + 1) * (1.0 + 0.5 * step);
        const at::Tensor out = ec.forward(step, branch, x, [&] { return x + res; });
        if (branch == 1) got[step] = (out - x).mean().item<double>();
      }
    const auto s = skipped(ec, 1);
    ASSERT_FALSE(s.empty());
    EXPECT_FALSE(s.count(0) || s.count(1) || s.count(2) || s.count(7));
    int64_t last_full = -1;
    for (int64_t step = 0; step < 8; ++step) {
      if (!s.count(step)) {
        EXPECT_NEAR(got[step], 2 * (1.0 + 0.5 * step), 1e-5) << "computed step " << step;
        last_full = step;
        continue;
      }
      // order 1: the line through the last two computations, which is the residual's own line here
      const double want = order == 1 ? 2 * (1.0 + 0.5 * step) : 2 * (1.0 + 0.5 * last_full);
      EXPECT_NEAR(got[step], want, 1e-5) << "skipped step " << step;
    }
    EXPECT_EQ(trace.get("cache.easycache.forecasts"), order == 1 ? 2.0 * static_cast<double>(s.size()) : 0.0);
  }
}

// TaylorSeer's schedule: the warm-up, then every `interval` steps counted from the warm-up's end, and the
// last step; the same steps for both branches, whatever the inputs; a branch with no residual computes.
TEST(CachePolicies, TaylorSeerComputesOnAFixedSchedule) {
  struct Case {
    int64_t steps, interval, warmup;
    bool dense_last;
    std::set<int64_t> skipped;
  };
  const std::vector<Case> cases = {
      {11, 3, 2, true, {3, 4, 6, 7, 9}},       // computed 0 1 | 2 5 8 | 10 (the last)
      {11, 3, 2, false, {3, 4, 6, 7, 9, 10}},  // the last step forecast too
      {12, 3, 2, false, {3, 4, 6, 7, 9, 10}},  // 11 = 2 + 3 * 3 is on the schedule anyway
      {8, 2, 0, true, {1, 3, 5}},              // no warm-up: step 0 is the schedule's first
      {6, 4, 5, true, {}},                     // the warm-up covers all but the last
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.steps << " steps, interval " << c.interval << ", warm-up " << c.warmup
                                      << (c.dense_last ? ", dense last" : ""));
    TaylorSeerOptions o;
    o.enabled = true;
    o.interval = c.interval;
    o.warmup_steps = c.warmup;
    o.dense_last_step = c.dense_last;
    Trace trace;
    TaylorSeer ts(o, c.steps, &trace);
    int calls = 0;
    for (int64_t step = 0; step < c.steps; ++step)
      for (int branch : {0, 1}) {
        // Inputs and outputs that change a lot from step to step: the schedule ignores them.
        const at::Tensor x = filled(std::pow(-3.0, static_cast<double>(step)) + branch);
        ts.forward(step, branch, x, [&] {
          ++calls;
          return x * (step + 2);
        });
        EXPECT_EQ(ts.scheduled(step), !c.skipped.count(step)) << step;
      }
    EXPECT_EQ(skipped(ts, 0), c.skipped);
    EXPECT_EQ(skipped(ts, 1), c.skipped);
    const auto n_skipped = static_cast<double>(2 * c.skipped.size());
    EXPECT_EQ(calls, 2 * c.steps - static_cast<int64_t>(n_skipped));
    EXPECT_EQ(trace.get("cache.taylorseer.skipped_forwards"), n_skipped);
    EXPECT_EQ(trace.get("cache.taylorseer.computed_forwards"), static_cast<double>(calls));
    EXPECT_DOUBLE_EQ(trace.get("cache.skip_ratio"), n_skipped / static_cast<double>(2 * c.steps));
  }
  // A branch seen first at a step the schedule skips has nothing to forecast from: it computes.
  TaylorSeerOptions o;
  o.enabled = true;
  o.interval = 2;
  o.warmup_steps = 0;
  TaylorSeer late(o, 8, nullptr);
  for (int64_t step = 0; step < 8; ++step)
    for (int branch : {0, 1})
      if (branch == 0 || step >= 1) late.forward(step, branch, filled(1.0), [] { return filled(2.0); });
  EXPECT_EQ(skipped(late, 0), (std::set<int64_t>{1, 3, 5}));
  EXPECT_EQ(skipped(late, 1), (std::set<int64_t>{3, 5}));
}

// TaylorSeer's forecasts on a residual (output - input) that is an exact polynomial in the step index:
// order 2 follows a quadratic exactly, order 1 a line (and misses the quadratic), order 0 reuses the residual
// of the last full computation.
TEST(CachePolicies, TaylorSeerForecastsTheResidualByATaylorSeries) {
  at::manual_seed(3);
  const at::Tensor a = at::randn({1, 2, 4}), b = at::randn({1, 2, 4}), c = at::randn({1, 2, 4});
  auto residual = [&](int64_t s, bool quadratic) {
    const double t = static_cast<double>(s);
    return quadratic ? a + b * t + c * (t * t) : a + b * t;
  };
  // warm-up 3, interval 3, 10 steps: computed 0 1 2 3 6 9, forecast 4 5 7 8.
  const std::set<int64_t> want_skipped{4, 5, 7, 8};
  for (const bool quadratic : {false, true})
    for (const int64_t order : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << "order " << order << (quadratic ? ", quadratic" : ", linear"));
      TaylorSeerOptions o;
      o.enabled = true;
      o.interval = 3;
      o.warmup_steps = 3;
      o.order = order;
      Trace trace;
      TaylorSeer ts(o, 10, &trace);
      int64_t last_full = -1;
      double worst = 0;  // the largest forecast error over the skipped steps
      for (int64_t step = 0; step < 10; ++step)
        for (int branch : {0, 1}) {
          const at::Tensor x = at::full({1, 2, 4}, 0.1 * static_cast<double>(step * step) - branch);
          const at::Tensor want = residual(step, quadratic) * (branch + 1);
          const at::Tensor out = ts.forward(step, branch, x, [&] { return x + want; });
          if (!want_skipped.count(step)) {
            last_full = step;
            continue;
          }
          const at::Tensor got = out - x;
          if (order == 0) {
            EXPECT_TRUE(at::allclose(got, residual(last_full, quadratic) * (branch + 1), 1e-5, 1e-4)) << step;
          }
          worst = std::max(worst, (got - want).abs().max().item<double>());
        }
      EXPECT_EQ(skipped(ts, 0), want_skipped);
      const bool exact = order == 2 || (order == 1 && !quadratic);
      if (exact) {
        EXPECT_LT(worst, 1e-3);
      } else {
        EXPECT_GT(worst, 0.1);
      }
      EXPECT_EQ(trace.get("cache.taylorseer.forecasts"),
                order >= 1 ? 2.0 * static_cast<double>(want_skipped.size()) : 0.0);
    }

  // Fewer full computations than the order asks for: a lower order. No warm-up, interval 2, order 2 on the
  // quadratic: step 1 reuses step 0's residual, step 3 follows the line through steps 0 and 2, step 5 the
  // parabola through 0, 2 and 4 (exact).
  TaylorSeerOptions o;
  o.enabled = true;
  o.interval = 2;
  o.warmup_steps = 0;
  o.order = 2;
  o.dense_last_step = false;
  Trace trace;
  TaylorSeer ts(o, 6, &trace);
  std::map<int64_t, at::Tensor> got;
  for (int64_t step = 0; step < 6; ++step) {
    const at::Tensor x = filled(static_cast<double>(step));
    got[step] = ts.forward(step, 0, x, [&] { return x + residual(step, true); }) - x;
  }
  EXPECT_EQ(skipped(ts, 0), (std::set<int64_t>{1, 3, 5}));
  EXPECT_TRUE(at::allclose(got[1], residual(0, true), 1e-5, 1e-5));
  const at::Tensor line = residual(2, true) + (residual(2, true) - residual(0, true)) / 2.0;
  EXPECT_TRUE(at::allclose(got[3], line, 1e-5, 1e-4));
  EXPECT_FALSE(at::allclose(got[3], residual(3, true), 1e-5, 1e-2));
  EXPECT_TRUE(at::allclose(got[5], residual(5, true), 1e-5, 1e-3));
  EXPECT_EQ(trace.get("cache.taylorseer.forecasts"), 2.0);
}

TEST(CachePolicies, OnlyOnePolicyIsMadeAndNoneByDefault) {
  EXPECT_EQ(make_cache_policy(RuntimeOptions{}, 10, nullptr), nullptr);
  RuntimeOptions o;
  o.of<FirstBlockCacheOptions>().enabled = true;
  auto p = make_cache_policy(o, 10, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(dynamic_cast<FirstBlockCache*>(p.get()), nullptr);
  EXPECT_TRUE(p->hooks_blocks());
  RuntimeOptions t;
  t.of<TaylorSeerOptions>().enabled = true;
  auto ts = make_cache_policy(t, 10, nullptr);
  EXPECT_NE(dynamic_cast<TaylorSeer*>(ts.get()), nullptr);
  EXPECT_FALSE(ts->hooks_blocks());
}

// Each policy on the tiny model through the pipeline's loop: it skips, the harness's engagement check
// passes, and what it counts agrees with the transformer's forwards.
TEST(CachePolicies, EachPolicyEngagesOnTheTinyModel) {
  auto m = load_model(LoadRequest{});
  GenerateParams p;
  p.prompt = "a red fox running through snow";
  p.height = 64;
  p.width = 96;
  p.frames = 9;
  p.steps = 6;
  const auto base = m.pipeline->generate(p);
  struct Case {
    const char* name;
    std::function<void(RuntimeOptions&)> on;
  };
  const std::vector<Case> cases = {
      {"teacache",
       [](RuntimeOptions& o) {
         o.of<TeaCacheOptions>().enabled = true;
         o.of<TeaCacheOptions>().threshold = 10;
         o.of<TeaCacheOptions>().warmup_steps = 1;
       }},
      {"magcache",
       [](RuntimeOptions& o) {
         o.of<MagCacheOptions>().enabled = true;
         o.of<MagCacheOptions>().warmup_steps = 1;
         o.of<MagCacheOptions>().ratios = {1.0};
       }},
      {"first_block_cache",
       [](RuntimeOptions& o) {
         o.of<FirstBlockCacheOptions>().enabled = true;
         o.of<FirstBlockCacheOptions>().threshold = 10;
       }},
      {"forced_skip",
       [](RuntimeOptions& o) {
         o.of<ForcedSkipOptions>().steps = {2, 3};
       }},
      // computed 0 1 | 2 4 | 5 (the last): step 3 forecast linearly
      {"taylorseer",
       [](RuntimeOptions& o) {
         o.of<TaylorSeerOptions>().enabled = true;
         o.of<TaylorSeerOptions>().interval = 2;
         o.of<TaylorSeerOptions>().warmup_steps = 2;
       }},
      // computed 0 1 2 | 5: steps 3 and 4 forecast on the parabola through steps 0, 1 and 2
      {"taylorseer",
       [](RuntimeOptions& o) {
         o.of<TaylorSeerOptions>().enabled = true;
         o.of<TaylorSeerOptions>().interval = 3;
         o.of<TaylorSeerOptions>().warmup_steps = 2;
         o.of<TaylorSeerOptions>().order = 2;
       }},
      {"easycache",
       [](RuntimeOptions& o) {
         o.of<EasyCacheOptions>().enabled = true;
         o.of<EasyCacheOptions>().threshold = 1.0;
         o.of<EasyCacheOptions>().warmup_steps = 2;
       }},
      {"easycache",
       [](RuntimeOptions& o) {
         o.of<EasyCacheOptions>().enabled = true;
         o.of<EasyCacheOptions>().threshold = 1.0;
         o.of<EasyCacheOptions>().warmup_steps = 2;
         o.of<EasyCacheOptions>().order = 1;
       }},
  };
  std::vector<at::Tensor> videos;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RuntimeOptions o;
    c.on(o);
    m.pipeline->set_options(o);
    const auto r = m.pipeline->generate(p);
    EXPECT_GT(r.trace.get(std::string("cache.") + c.name + ".skipped_forwards"), 0);
    EXPECT_GT(r.trace.get("cache.skip_ratio"), 0);
    EXPECT_LT(r.trace.get("cache.skip_ratio"), 1);
    EXPECT_TRUE(engagement_problems(o, r.trace).empty()) << engagement_problems(o, r.trace).front();
    EXPECT_FALSE(at::equal(r.video, base.video));
    // Order 1 forecasts every skipped branch forward; order 0 (and every other policy) forecasts none.
    EXPECT_EQ(r.trace.get("cache.easycache.forecasts"),
              o.of<EasyCacheOptions>().order == 1 ? r.trace.get("cache.easycache.skipped_forwards") : 0.0);
    EXPECT_EQ(r.trace.get("cache.taylorseer.forecasts"),
              o.of<TaylorSeerOptions>().enabled ? r.trace.get("cache.taylorseer.skipped_forwards") : 0.0);
    if (o.of<TaylorSeerOptions>()
            .enabled) {  // its schedule, whatever the model: step 3 (interval 2), steps 3 and 4 (interval 3)
      EXPECT_DOUBLE_EQ(r.trace.get("cache.skip_ratio"),
                       o.of<TaylorSeerOptions>().interval == 2 ? 1.0 / 6.0 : 2.0 / 6.0);
    }
    videos.push_back(r.video);
  }
  // The forecast changes what a skipped step yields: EasyCache order 1 is not order 0 under another name.
  EXPECT_FALSE(at::equal(videos[videos.size() - 1], videos[videos.size() - 2]));
  // Forced: 2 of 6 steps, both branches.
  RuntimeOptions f;
  f.of<ForcedSkipOptions>().steps = {2, 3};
  m.pipeline->set_options(f);
  EXPECT_DOUBLE_EQ(m.pipeline->generate(p).trace.get("cache.skip_ratio"), 2.0 / 6.0);
  // Calibration runs change nothing and record what the fits read.
  RuntimeOptions cal;
  cal.of<TeaCacheOptions>().calibrate = true;
  m.pipeline->set_options(cal);
  const auto rc = m.pipeline->generate(p);
  EXPECT_TRUE(at::equal(rc.video, base.video));
  EXPECT_EQ(find("teacache")->calibration->fit({rc.trace})["teacache"]["coefficients"].size(), 3u);
  m.pipeline->set_options({});
}

}  // namespace
}  // namespace autooptim::runtime::techniques
