#pragma once
// Quantisation technique (family `quant`, lossy): the transformer's large linears (self-attention q/k/v
// and output, cross-attention q and output, both FFN projections) as FP8 e4m3 GEMMs through
// at::_scaled_mm (cuBLASLt) with per-output-channel weight scales and per-token activation scales.
// Weights are quantised once, on first use, and kept beside the bf16 ones (switching the flag off needs
// no reload). Activations are quantised by one CUDA pass per GEMM input (fp8_quantize.cu); the FFN's
// GELU is folded into the quantisation of the second projection's input. GPU builds with libtorch >= 2.5
// on an FP8-capable GPU (sm_89+); elsewhere the bf16 path runs and the switch does not engage.
#include <ATen/ATen.h>

#include <vector>

#include "runtime/techniques/quant/fp8_linear_options.h"
#include "runtime/forward_context.h"
#include "runtime/nn.h"

namespace autooptim::runtime::techniques {

bool fp8_applies(const ForwardContext* fc, const at::Tensor& x, const Linear& lin);
// lin(x), or lin(gelu_tanh(x)) with gelu_input, in FP8. Counts quant.fp8.gemms.
at::Tensor fp8_linear(const Linear& lin, const at::Tensor& x, const ForwardContext* fc, bool gelu_input = false);
// Several linears of the same input (q, k, v): the input is quantised once.
std::vector<at::Tensor> fp8_linears(const std::vector<const Linear*>& lins, const at::Tensor& x,
                                    const ForwardContext* fc);

// Quantised copy of a weight [N, K]: e4m3 values and float32 scales [1, N] (exposed for tests).
struct Fp8Weight {
  at::Tensor w;      // [N, K] float8_e4m3fn
  at::Tensor scale;  // [1, N] float32
};
Fp8Weight quantize_weight_e4m3(const at::Tensor& weight);
// Per-row quantisation of x [M, K] (bf16, CUDA): values [M, K] e4m3 and scales [M, 1] float32.
std::pair<at::Tensor, at::Tensor> quantize_rows_e4m3(const at::Tensor& x, bool gelu);

}  // namespace autooptim::runtime::techniques
