#pragma once
// The one place where libtorch versions differ for us: Debian's 1.13 (CPU) and CUDA libtorch 2.x.
#include <ATen/ATen.h>
#include <torch/version.h>

namespace autooptim::runtime::compat {

constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// Scaled-dot-product attention over [B, heads, L, d] without mask or dropout.
// libtorch 2.x has the public fused op (flash / cuDNN / efficient backends); 1.13 only the private
// math op, which returns (output, weights).
inline at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, false));
#endif
}

}  // namespace autooptim::runtime::compat
