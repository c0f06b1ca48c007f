#pragma once
// How a denoising loop feeds its transformer, by the pipeline's spec and the condition it was given: the
// model input of the current latents, the timestep tensor of a step, and the latents the loop returns.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace autooptim::runtime {

struct PipelineSpec;  // runtime/wan_pipeline.h

class DenoiseFeed {
 public:
  // condition: undefined (T2V), [B, z, 1, h, w] (expand_timesteps I2V: the image's latent) or
  // [B, c, T', h, w] (channel-conditioned I2V); latents [B, z, T', h, w] on the loop's device.
  DenoiseFeed(const PipelineSpec& spec, const at::Tensor& condition, const at::Tensor& latents,
              const std::vector<int64_t>& patch_size);

  // The transformer's input for the current latents (float32; the caller casts to the compute dtype).
  at::Tensor model_input(const at::Tensor& latents) const;
  // Timestep t for a batch: [B, L] per token (expand_timesteps, 0 on the image's frame) or [B].
  at::Tensor timestep(double t, int64_t batch) const;
  // What the loop returns: the image's latent re-imposed on frame 0 (expand_timesteps I2V), else as is.
  at::Tensor final_latents(const at::Tensor& latents) const;

 private:
  enum class Kind { kPerToken, kPerSample, kChannels };
  Kind kind_;
  at::Tensor condition_;   // on the latents' device, float32
  at::Tensor mask_;        // kPerToken: [1, 1, T', h, w], 0 on the image's frame
  at::Tensor token_mask_;  // kPerToken: [L]
  at::TensorOptions options_;
};

}  // namespace autooptim::runtime
