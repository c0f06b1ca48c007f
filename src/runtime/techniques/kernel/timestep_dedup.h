#pragma once
// Kernel technique: the time embedding computed once per distinct timestep value. In TI2V every token
// carries a timestep but only two values occur (0 on the image frame, t elsewhere), so the reference's
// per-token time MLP and projection (3.6 TFLOP at 720p) shrink to two rows, gathered back per token.
#include <ATen/ATen.h>

#include <functional>
#include <utility>

#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// t [N] float; embed maps a [U] tensor of timesteps to a tuple of per-row tensors [U, ...].
// Returns the same tensors for all N rows, computed on the unique values only. Counts
// kernel.timestep_dedup.rows_saved (N - U).
std::pair<at::Tensor, at::Tensor> dedup_time_embedding(
    const at::Tensor& t, const std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor&)>& embed,
    const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
