#pragma once
// Cache technique: EasyCache (H-EmbodVis/EasyCache, described in ../shared/docs/techniques.md), a
// training-free, runtime-adaptive step cache. After a dense warm-up, the conditional branch estimates
// how much the transformer's output would change from the input's change and the transformation rate
// k = mean|d out| / mean|d in| of the last two full computations; while the accumulated estimate stays
// under the threshold, both guidance branches reuse their own last residual (output - input) instead
// of running the transformer. The last step is always computed. With order 1 a skipped step does not reuse
// the residual as it was but extrapolates it linearly in the step index from the branch's last two full
// computations (TaylorSeer's first-order forecast: "From Reusing to Forecasting", Liu et al., ICCV 2025),
// which follows a residual that drifts steadily (brightness, colour) where reuse freezes it.
#include <ATen/ATen.h>

#include <functional>

#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/options.h"
#include "runtime/techniques/cache/cache_policy.h"
#include "runtime/trace.h"

namespace autooptim::runtime::techniques {

class EasyCache : public CachePolicy {
 public:
  EasyCache(const EasyCacheOptions& o, int64_t steps, Trace* trace);

  // The velocity for `branch` (0 = conditional, which decides for the step; 1 = unconditional) at
  // `step` for transformer input x; `full` runs the transformer. Counts
  // cache.easycache.{computed,skipped}_forwards.
  at::Tensor forward(int64_t step, int branch, const at::Tensor& x, const std::function<at::Tensor()>& full) override;

  double accumulated() const { return acc_; }
  double rate() const { return k_; }

 private:
  EasyCacheOptions o_;
  bool compute_step_ = true;
  double acc_ = 0;
  double k_ = -1;                  // unknown until two full computations
  at::Tensor prev_x_;              // conditional input at the previous step
  at::Tensor last_in_, last_out_;  // conditional input/output of the last full computation
  at::Tensor residual_[2];         // per branch: output - input of its last full computation
  at::Tensor before_[2];           // per branch: the residual of the full computation before it (order 1)
  int64_t at_[2] = {-1, -1}, before_at_[2] = {-1, -1};  // their steps
};

}  // namespace autooptim::runtime::techniques
