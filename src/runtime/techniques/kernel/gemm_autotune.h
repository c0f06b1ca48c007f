#pragma once
// Kernel technique gemm_autotune (gemm_autotune.cpp): the transformer's linear layers through cuBLASLt
// with the fastest of its heuristic's algorithms per GEMM shape, timed on the first call of the shape.
#include <ATen/ATen.h>

#include "runtime/techniques/kernel/gemm_autotune_options.h"
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// y = x W^T (+ bias) (then GELU-tanh when gelu), x [..., K] and W [N, K] bf16 on the GPU, contiguous, K
// and N multiples of 8. Undefined where it does not apply (switch off, a CPU build or tensors, a shape
// cuBLASLt ran no algorithm for, the first call of a shape inside a CUDA graph capture): the caller then
// runs its own op. Counts kernel.gemm_autotune.gemms, and .shapes_tuned once per shape.
at::Tensor tuned_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool gelu,
                        const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
