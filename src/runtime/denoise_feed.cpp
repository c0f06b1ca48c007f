#include "runtime/denoise_feed.h"

#include <string>

#include "base/error.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::runtime {
namespace {

// The latent mask [1, 1, T', h, w] per transformer token: [T'/pt, h/ph, w/pw] -> [L].
at::Tensor token_mask_of(const at::Tensor& mask, const std::vector<int64_t>& pc) {
  return mask[0][0]
      .slice(0, 0, c10::nullopt, pc[0])
      .slice(1, 0, c10::nullopt, pc[1])
      .slice(2, 0, c10::nullopt, pc[2])
      .reshape({-1});
}

std::string sizes_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

DenoiseFeed::DenoiseFeed(const PipelineSpec& spec, const at::Tensor& condition, const at::Tensor& latents,
                         const std::vector<int64_t>& patch_size)
    : options_(latents.options()) {
  if (condition.defined()) condition_ = condition.to(latents.device(), at::kFloat);
  if (!spec.expand_timesteps) {
    kind_ = condition_.defined() ? Kind::kChannels : Kind::kPerSample;
    if (condition_.defined() &&
        (condition_.dim() != 5 || condition_.size(0) != latents.size(0) || condition_.size(2) != latents.size(2) ||
         condition_.size(3) != latents.size(3) || condition_.size(4) != latents.size(4)))
      throw Error("denoise: the channel condition " + sizes_of(condition_) + " does not match the latents " +
                  sizes_of(latents));
    return;
  }
  kind_ = Kind::kPerToken;
  // TI2V: mask 0 on latent frame 0 (the image), 1 elsewhere; a token's timestep is mask * t.
  mask_ = at::ones({1, 1, latents.size(2), latents.size(3), latents.size(4)}, latents.options());
  if (condition_.defined()) mask_.select(2, 0).zero_();
  token_mask_ = token_mask_of(mask_, patch_size);
}

at::Tensor DenoiseFeed::model_input(const at::Tensor& latents) const {
  switch (kind_) {
    case Kind::kPerToken:
      return condition_.defined() ? (1 - mask_) * condition_ + mask_ * latents : latents;
    case Kind::kChannels:
      return at::cat({latents, condition_}, 1);
    case Kind::kPerSample:
      break;
  }
  return latents;
}

at::Tensor DenoiseFeed::timestep(double t, int64_t batch) const {
  if (kind_ == Kind::kPerToken) return (token_mask_ * t).unsqueeze(0).expand({batch, -1});  // [B, L] float32
  return at::full({batch}, t, options_.dtype(at::kFloat));
}

at::Tensor DenoiseFeed::final_latents(const at::Tensor& latents) const {
  if (kind_ == Kind::kPerToken && condition_.defined()) return (1 - mask_) * condition_ + mask_ * latents;
  return latents;
}

}  // namespace autooptim::runtime
