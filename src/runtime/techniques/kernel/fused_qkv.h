#pragma once
// Kernel technique: the q, k and v projections of self-attention as one GEMM over weights merged once
// (on first use, kept beside the originals so switching the flag off needs no reload).
#include <ATen/ATen.h>

#include <tuple>

#include "runtime/techniques/kernel/fused_qkv_options.h"
#include "runtime/forward_context.h"
#include "runtime/nn.h"

namespace autooptim::runtime::techniques {

struct FusedQKVWeights {
  at::Tensor weight;  // [3D, D]
  at::Tensor bias;    // [3D]
};

// x [B, L, D] -> q, k, v [B, L, D] each. Counts kernel.fused_qkv.launches.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_qkv(const at::Tensor& x, const Linear& q, const Linear& k,
                                                         const Linear& v, FusedQKVWeights& merged,
                                                         const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
