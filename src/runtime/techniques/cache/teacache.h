#pragma once
// Cache technique: a TeaCache-style block cache (described in ../shared/docs/techniques.md). Each
// forward, the relative L1 change of block 0's modulated input since the branch's previous step is
// rescaled by a polynomial (fitted once on visible prompts by the calibration mode and stored in the
// manifest; the identity when uncalibrated) into an estimate of the output's change. The estimates
// accumulate per CFG branch; while the sum stays under the threshold the branch's block stack is
// skipped and its cached residual (stack output - input of its last computation) reused; computing
// resets the sum. Warm-up steps and (optionally) the last step are always computed.
//
// Calibration mode computes every forward and records, per branch and step, the input change
// (cache.teacache.calibration.input.<b>.<step>) and the block stack's output change
// (...output.<b>.<step>), from which the registry's fit derives the polynomial.
#include <ATen/ATen.h>

#include "runtime/techniques/cache/teacache_options.h"
#include "runtime/options.h"
#include "runtime/techniques/cache/cache_policy.h"

namespace autooptim::runtime::techniques {

class TeaCache : public CachePolicy {
 public:
  TeaCache(const TeaCacheOptions& o, int64_t steps, Trace* trace);
  at::Tensor blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) override;
  bool hooks_blocks() const override { return true; }

  // The rescaled estimate of a relative input change x (never negative).
  double estimate(double x) const;
  double accumulated(int branch) const { return branch_[branch].acc; }

 private:
  struct Branch {
    at::Tensor prev_input;  // modulated input at the previous step
    at::Tensor prev_out;    // stack output of the previous computation (calibration only)
    at::Tensor residual;    // stack output - input of the last computation
    double acc = 0;
  };
  TeaCacheOptions o_;
  Branch branch_[2];
};

}  // namespace autooptim::runtime::techniques
