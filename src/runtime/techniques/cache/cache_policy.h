#pragma once
// The cache family's hooks. A cache policy sees every transformer forward of a generation at one or both
// of two sites: the pipeline's call of the transformer (forward(): may return a velocity without running
// it) and the transformer's block stack (blocks(): may return its output without running the blocks).
// Policies decide per CFG branch (0 conditional, 1 unconditional) unless they say otherwise, and count
// cache.<name>.computed_forwards / .skipped_forwards and the family's cache.forwards /
// cache.skipped_forwards, whose ratio is cache.skip_ratio (the forward-skip ratio).
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/extension_points.h"  // BlockStack, run_blocks, StepCache
#include "runtime/options.h"
#include "runtime/trace.h"

namespace autooptim::runtime::techniques {

using runtime::BlockStack;
using runtime::run_blocks;

// Installed as the transformer's step cache (ForwardContext::cache) for a generation.
class CachePolicy : public StepCache {
 public:
  struct Decision {
    int64_t step;
    int branch;
    bool skipped;
  };

  CachePolicy(std::string name, int64_t steps, Trace* trace);
  ~CachePolicy() override = default;

  // The velocity of (step, branch) for transformer input x [B, C, F, H, W]; full() runs the transformer.
  virtual at::Tensor forward(int64_t step, int branch, const at::Tensor& x, const std::function<at::Tensor()>& full);
  // The block stack's output for tokens h [B, L, D] of (step, branch).
  at::Tensor blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) override;
  // True when blocks() decides between blocks on the host (the body cannot be a CUDA graph then).
  bool hooks_blocks() const override { return false; }

  // Every decision so far, in order (for tests and the trace).
  const std::vector<Decision>& decisions() const { return decisions_; }

 protected:
  void decided(int64_t step, int branch, bool skipped);
  // Adds a calibration value: cache.<name>.calibration.<what>.<branch>.<step, 4 digits>.
  void record(const std::string& what, int branch, int64_t step, double v);
  bool last_step(int64_t step) const { return step == steps_ - 1; }

  std::string name_;
  int64_t steps_;
  Trace* trace_;

 private:
  std::vector<Decision> decisions_;
};

// The cache policy `o` turns on (at most one: manifests refuse two), or null.
std::unique_ptr<CachePolicy> make_cache_policy(const RuntimeOptions& o, int64_t steps, Trace* trace);

// mean|now - before| / mean|before| (in float32); a large value when `before` is all zeros.
double relative_l1(const at::Tensor& now, const at::Tensor& before);

}  // namespace autooptim::runtime::techniques
