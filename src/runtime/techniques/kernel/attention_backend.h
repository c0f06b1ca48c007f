#pragma once
// Kernel technique: the choice of attention kernel (cuDNN, flash, memory-efficient, math) for the
// transformer's self- and cross-attention. Off ("auto") is libtorch's own dispatch.
#include <ATen/ATen.h>

#include "runtime/techniques/kernel/attention_backend_options.h"
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// q, k, v [B, heads, L, d] -> [B, heads, L, d]; counts kernel.attention.<backend>.calls.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
