#pragma once
// Kernel technique: dense attention on our Hopper kernel (hopper_attention.cu) where it applies.
#include <ATen/ATen.h>

#include "runtime/techniques/kernel/hopper_attention_options.h"
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// hopper_attention is on and q, k, v [B, heads, L, d] can take the kernel: a CUDA build, a compute
// capability 9.0 GPU, bf16, d = 128, the head dim contiguous, the other strides multiples of 8 elements.
bool hopper_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc);

// softmax(q k^T / sqrt(d)) v as [B, heads, L, d] (a view of a [B, L, heads, d] tensor) for operands that
// hopper_attention_applies has accepted (not checked again); counts kernel.hopper_attention.calls.
at::Tensor hopper_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc);

// The kernel itself with an explicit variant (1-6), for tests and timing. Throws where it does not apply.
at::Tensor hopper_attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int variant);

}  // namespace autooptim::runtime::techniques
