#include "workers/trial_baselines.h"

namespace autooptim::workers {
namespace {

// The prompt's text is part of the key: an id reused for another prompt is another run.
std::string key_of(const gates::Manifest& base, const gates::Prompt& p) {
  return gates::manifest_hash(base) + "\n" + p.id + "\n" + p.text + "\n" + std::to_string(base.config.seed);
}

}  // namespace

std::optional<TrialBaselineRun> TrialBaselines::find(const gates::Manifest& base, const gates::Prompt& p) const {
  if (!reuse_) return std::nullopt;
  const auto it = runs_.find(key_of(base, p));
  if (it == runs_.end()) return std::nullopt;
  return it->second;
}

void TrialBaselines::keep(const gates::Manifest& base, const gates::Prompt& p, const at::Tensor& video,
                          double seconds) {
  if (!reuse_) return;
  TrialBaselineRun r;
  r.video8 = (video.to(at::kCPU, at::kFloat) * 255.0).round().clamp(0, 255).to(at::kByte);
  r.seconds = seconds;
  runs_[key_of(base, p)] = std::move(r);
}

at::Tensor TrialBaselines::video(const TrialBaselineRun& run) { return run.video8.to(at::kFloat) / 255.0; }

bool reuse_trial_baselines(const std::string& mode, const at::Device& device) {
  return mode == "reuse" || (mode == "auto" && device.is_cuda());
}

}  // namespace autooptim::workers
