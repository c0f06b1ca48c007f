#pragma once
// Cache technique: a first-block cache. Block 0 always runs; its residual (output - input) is the
// signal. When that residual differs from the one of the branch's last full computation by less than
// the threshold (relative L1), blocks 1..N-1 are skipped and their cached residual (the stack's output
// minus block 0's output at that computation) is added to block 0's output. Per CFG branch; warm-up
// steps and (optionally) the last step are always computed. No calibration.
#include <ATen/ATen.h>

#include "runtime/techniques/cache/first_block_cache_options.h"
#include "runtime/options.h"
#include "runtime/techniques/cache/cache_policy.h"

namespace autooptim::runtime::techniques {

class FirstBlockCache : public CachePolicy {
 public:
  FirstBlockCache(const FirstBlockCacheOptions& o, int64_t steps, Trace* trace);
  at::Tensor blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) override;
  bool hooks_blocks() const override { return true; }

 private:
  struct Branch {
    at::Tensor first_residual;  // block 0's residual at the last full computation
    at::Tensor rest_residual;   // blocks 1..N-1's residual at the last full computation
  };
  FirstBlockCacheOptions o_;
  Branch branch_[2];
};

}  // namespace autooptim::runtime::techniques
