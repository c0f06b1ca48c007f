#pragma once
// Cache technique: TaylorSeer ("From Reusing to Forecasting: Accelerating Diffusion Models with TaylorSeers",
// Liu et al., ICCV 2025), a training-free step cache on a fixed schedule. After a dense warm-up the
// transformer runs in full every `interval` steps; at the steps in between each CFG branch forecasts its
// residual (output - input, over the whole transformer as with EasyCache) by a Taylor series in the step
// index, from the branch's last full computations (order 0: reuse; 1: linear; 2: quadratic, Newton divided
// differences). Unlike the adaptive policies it decides nothing from the model's outputs, so it skips the
// same steps on every model; whether the forecast is good enough is the quality gate's to say.
#include <ATen/ATen.h>

#include <functional>

#include "runtime/techniques/cache/taylorseer_options.h"
#include "runtime/options.h"
#include "runtime/techniques/cache/cache_policy.h"
#include "runtime/trace.h"

namespace autooptim::runtime::techniques {

class TaylorSeer : public CachePolicy {
 public:
  TaylorSeer(const TaylorSeerOptions& o, int64_t steps, Trace* trace);

  // The velocity for `branch` at `step` for transformer input x; `full` runs the transformer. Counts
  // cache.taylorseer.{computed,skipped}_forwards and cache.taylorseer.forecasts (skips with a Taylor term).
  at::Tensor forward(int64_t step, int branch, const at::Tensor& x, const std::function<at::Tensor()>& full) override;

  // Whether `step` is a full computation of the schedule (a branch without a residual computes regardless).
  bool scheduled(int64_t step) const;

 private:
  // The branch's Newton form after its last full computations, t[0] the latest step and t[1] the one before:
  // r(s) = r + (s - t[0]) * d1 + (s - t[0]) * (s - t[1]) * d2, with d1, d2 the divided differences (float32,
  // undefined while the branch has too few computations for them or the order stops below them).
  struct Forecast {
    at::Tensor r, d1, d2;
    int64_t t[2] = {-1, -1};
  };

  TaylorSeerOptions o_;
  Forecast f_[2];
};

}  // namespace autooptim::runtime::techniques
