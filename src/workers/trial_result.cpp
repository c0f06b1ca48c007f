#include "workers/trial_result.h"

#include "workers/messages.h"

namespace autooptim::workers {

nlohmann::json TrialResult::to_json() const {
  return {{"label", label},
          {"flags", flags},
          {"prompts", prompts},
          {"baseline_s", baseline_s},
          {"candidate_s", candidate_s},
          {"speedup", speedup},
          {"psnr_min", psnr_min},
          {"ssim_min", ssim_min},
          {"not_engaged", not_engaged},
          {"baselines_reused", baselines_reused},
          {"skip_ratio", skip_ratio < 0 ? nlohmann::json(nullptr) : nlohmann::json(skip_ratio)},
          {"density", density < 0 ? nlohmann::json(nullptr) : nlohmann::json(density)}};
}

TrialResult TrialResult::from_json(const nlohmann::json& j) {
  const MessageReader r(j, "trial result");
  TrialResult t;
  t.flags = r.object("flags");
  t.label = r.string("label");
  t.prompts = r.integer("prompts");
  t.baseline_s = r.number("baseline_s");
  t.candidate_s = r.number("candidate_s");
  t.speedup = r.number("speedup");
  t.psnr_min = r.number("psnr_min");
  t.ssim_min = r.number("ssim_min");
  t.not_engaged = r.strings("not_engaged");
  t.baselines_reused = r.integer("baselines_reused");
  t.skip_ratio = r.number_or_null("skip_ratio").value_or(-1);
  t.density = r.number_or_null("density").value_or(-1);
  return t;
}

}  // namespace autooptim::workers
