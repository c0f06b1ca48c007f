#pragma once
// What bfloat16 convolution on this CPU accumulates in. libtorch (Debian's 1.13) convolves bf16 through
// oneDNN, accumulating in float32, only where the CPU has AVX-512 (BW/VL/DQ); elsewhere it falls back to
// im2col and its own GEMM, which adds each product into the bf16 output: a sum of 1,024 ones stops at 256
// there. Tests that bound a bf16 decode against float32 take the wider bound on such CPUs (the GPU
// accumulates in float32 everywhere).
#include <ATen/ATen.h>

namespace autooptim::test {

inline bool cpu_bf16_conv_accumulates_in_bf16() {
  static const bool v = [] {
    const at::Tensor x = at::ones({1, 1024, 1, 1, 1}, at::kBFloat16);
    const at::Tensor w = at::ones({1, 1024, 1, 1, 1}, at::kBFloat16);
    return at::conv3d(x, w).item<float>() < 1000.f;
  }();
  return v;
}

}  // namespace autooptim::test
