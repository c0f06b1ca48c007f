#pragma once
// Cache technique for benchmarking: a forced skip schedule. At the listed steps every CFG branch reuses
// its last residual (velocity - input, as EasyCache does) instead of running the transformer, so the
// speed of a cache at a given forward-skip ratio can be measured at any shape (`autooptim bench
// --manifest` with forced_skip.steps). A listed step before the branch's first computation is computed.
#include <ATen/ATen.h>

#include <set>

#include "runtime/techniques/cache/forced_skip_options.h"
#include "runtime/options.h"
#include "runtime/techniques/cache/cache_policy.h"

namespace autooptim::runtime::techniques {

class ForcedSkip : public CachePolicy {
 public:
  ForcedSkip(const ForcedSkipOptions& o, int64_t steps, Trace* trace);
  at::Tensor forward(int64_t step, int branch, const at::Tensor& x, const std::function<at::Tensor()>& full) override;

 private:
  std::set<int64_t> skip_;
  at::Tensor residual_[2];
};

}  // namespace autooptim::runtime::techniques
