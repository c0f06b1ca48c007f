#pragma once
// Kernel technique: a per-token timestep [B, L] whose tokens all carry their sample's value (text-to-video:
// TI2V's mask is 1 everywhere without a conditioning image) handled as the per-sample timestep [B] it is.
#include <ATen/ATen.h>

#include "runtime/techniques/kernel/uniform_timestep_options.h"
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// With uniform_timestep on and t [B, L] constant along L: t's first column [B], counting
// kernel.uniform_timestep.samples (B) and kernel.uniform_timestep.rows_saved (B * (L - 1)). Undefined
// otherwise (the switch off, t [B], or a sample with two values, as in image-to-video).
at::Tensor uniform_timesteps(const at::Tensor& t, const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
