#pragma once
// Cache technique: a MagCache-style block cache (described in ../shared/docs/techniques.md). The
// magnitude ratio r_t = mean over tokens of |residual_t| / |residual_t-1| (residual = block stack
// output - input) falls smoothly over the steps and is nearly prompt-independent, so it is calibrated
// once (on visible prompts, per CFG branch) and stored in the manifest. While skipping, each branch
// accumulates gamma = product of r_t and the error sum |1 - gamma|; it skips (reusing its cached
// residual) while the error stays under the threshold and at most max_skips steps in a row, then
// computes and resets. A schedule of another length than the run's steps is read at the nearest
// relative position.
//
// Calibration mode computes every forward and records r_t per branch and step
// (cache.magcache.calibration.ratio.<b>.<step>).
#include <ATen/ATen.h>

#include "runtime/techniques/cache/magcache_options.h"
#include "runtime/options.h"
#include "runtime/techniques/cache/cache_policy.h"

namespace autooptim::runtime::techniques {

class MagCache : public CachePolicy {
 public:
  MagCache(const MagCacheOptions& o, int64_t steps, Trace* trace);
  at::Tensor blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) override;
  bool hooks_blocks() const override { return true; }

  // The calibrated ratio of `branch` at `step` of this run.
  double ratio(int branch, int64_t step) const;

 private:
  struct Branch {
    at::Tensor residual;
    double gamma = 1, err = 0;
    int64_t skips = 0;
  };
  MagCacheOptions o_;
  Branch branch_[2];
};

}  // namespace autooptim::runtime::techniques
