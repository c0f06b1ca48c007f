#pragma once
// Kernel technique: the rotary tables (cos and sin per token and lane pair) depend only on the model and
// the latent grid, yet the reference builds them in every forward (float64 on the host, then copied to
// the device, which waits for the copy). With rope_cache the model keeps them on its device per grid.
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "runtime/techniques/kernel/rope_cache_options.h"

namespace autooptim::runtime {

struct ForwardContext;

// The model's tables per latent grid (F, H, W), on the model's device.
using RopeTables = std::map<std::array<int64_t, 3>, std::pair<at::Tensor, at::Tensor>>;

namespace techniques {

// The tables for grid (f, h, w): from `store` when the switch is on (counts kernel.rope_cache.hits, or
// .misses when it computes and keeps them), else compute().
std::pair<at::Tensor, at::Tensor> rope_tables(const ForwardContext* fc, RopeTables& store, int64_t f, int64_t h,
                                              int64_t w,
                                              const std::function<std::pair<at::Tensor, at::Tensor>()>& compute);

}  // namespace techniques
}  // namespace autooptim::runtime
