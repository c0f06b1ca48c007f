// Cache technique: a forced skip schedule, for benchmarking (see forced_skip.h). Never proposed.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/forced_skip_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(forced_skip) {
  Technique t;
  t.name = "forced_skip";
  t.family = "cache";
  t.lossless = false;
  t.summary =
      "benchmarking: at the listed steps every CFG branch reuses its last residual instead of running the "
      "transformer (records the forward-skip ratio); never proposed by the executors";
  t.group = "forced_skip";
  t.flags = {int_list_flag("steps", field(&ForcedSkipOptions::steps), 0, 999, 1000,
                           "step indices whose forwards are skipped")};
  t.switch_flag = "forced_skip.steps";
  t.exclusive_group = "step_cache";
  t.hooks = {"pipeline.transformer_call"};
  t.engagement = {{"cache.forced_skip.skipped_forwards", "forced_skip is on but no forward was skipped"}};
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    if (tr.get("cache.forced_skip.computed_forwards") != tr.get("transformer.forwards"))
      out.push_back("forced_skip: computed forwards in its counters disagree with the transformer's");
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/cache/forced_skip.h"

namespace autooptim::runtime::techniques {

ForcedSkip::ForcedSkip(const ForcedSkipOptions& o, int64_t steps, Trace* trace)
    : CachePolicy("forced_skip", steps, trace), skip_(o.steps.begin(), o.steps.end()) {}

at::Tensor ForcedSkip::forward(int64_t step, int branch, const at::Tensor& x_in,
                               const std::function<at::Tensor()>& full) {
  const at::Tensor x = x_in.to(at::kFloat);
  const bool skip = skip_.count(step) && residual_[branch].defined();
  decided(step, branch, skip);
  if (skip) return x + residual_[branch];
  const at::Tensor out = full().to(at::kFloat);
  residual_[branch] = out - x;
  return out;
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
