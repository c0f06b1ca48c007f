#pragma once
// Kernel technique: cross-attention keys and values (and the projected text they come from) depend only
// on the prompt, so with cross_kv_cache they are computed once per prompt and generation and reused by
// the later steps. The cache lives in the generation's ForwardContext, never across generations.
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <utility>

#include "runtime/techniques/kernel/cross_kv_cache_options.h"
#include "runtime/forward_context.h"  // CrossKVCache

namespace autooptim::runtime {
namespace techniques {

// The K/V of block fc->layer's cross-attention for the prompt `ctx_key`: cached when the switch is on
// (counts kernel.cross_kv_cache.hits and .misses), else compute().
std::pair<at::Tensor, at::Tensor> cross_attention_kv(const ForwardContext* fc, const void* ctx_key,
                                                     const std::function<std::pair<at::Tensor, at::Tensor>()>& compute);

// The projected text embedding [B, S, D] for `ctx_key`, cached the same way (not counted).
at::Tensor projected_text(const ForwardContext* fc, const void* ctx_key, const std::function<at::Tensor()>& compute);

}  // namespace techniques
}  // namespace autooptim::runtime
