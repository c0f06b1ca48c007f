#include "runtime/techniques/cache/easycache.h"

namespace autooptim::runtime::techniques {
namespace {
double mean_abs(const at::Tensor& t) { return t.abs().mean().item<double>(); }
}  // namespace

EasyCache::EasyCache(const EasyCacheOptions& o, int64_t steps, Trace* trace) : o_(o), steps_(steps), trace_(trace) {}

at::Tensor EasyCache::forward(int64_t step, int branch, const at::Tensor& x_in, const std::function<at::Tensor()>& full) {
  const at::Tensor x = x_in.to(at::kFloat);
  if (branch == 0) {
    bool compute = step < o_.warmup_steps || (o_.dense_last_step && step == steps_ - 1) || k_ < 0 ||
                   !prev_x_.defined() || !residual_[0].defined();
    if (!compute) {
      const double out_norm = mean_abs(last_out_);
      acc_ += out_norm > 0 ? k_ * mean_abs(x - prev_x_) / out_norm : 1e9;
      compute = acc_ >= o_.threshold;
    }
    if (compute) acc_ = 0;
    compute_step_ = compute;
    prev_x_ = x;
  }
  // The unconditional branch follows the conditional one's decision, but needs its own residual.
  const bool compute = compute_step_ || !residual_[branch].defined();
  if (!compute) {
    if (trace_) trace_->add("cache.easycache.skipped_forwards");
    return x + residual_[branch];
  }
  const at::Tensor out = full().to(at::kFloat);
  if (trace_) trace_->add("cache.easycache.computed_forwards");
  residual_[branch] = out - x;
  if (branch == 0) {
    if (last_in_.defined()) {
      const double din = mean_abs(x - last_in_);
      k_ = din > 0 ? mean_abs(out - last_out_) / din : k_;
    }
    last_in_ = x;
    last_out_ = out;
  }
  return out;
}

}  // namespace autooptim::runtime::techniques
