#pragma once
// The one place where libtorch versions differ for us: Debian's 1.13 (CPU) and CUDA libtorch 2.x.
#include <ATen/ATen.h>
#include <torch/version.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace autooptim::runtime::compat {

constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// Scaled-dot-product attention over [B, heads, L, d] without mask or dropout, on the build's default
// dispatch. libtorch 2.x has the public fused op (flash / cuDNN / efficient backends); 1.13 only the
// private math op, which returns (output, weights).
inline at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, false));
#endif
}

// RMSNorm over the last dim with a gain, statistics in float32: libtorch 2.x has a fused op (one pass
// on CUDA), 1.13 gets the composite. Returns the input's dtype.
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps);
#endif
  const at::Tensor xf = x.to(at::kFloat);
  return (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps) * weight.to(at::kFloat)).to(x.scalar_type());
}

// The same on one named backend: "math" everywhere; "flash", "efficient", "cudnn" on CUDA builds of
// libtorch 2.x (cudnn from 2.5). Throws std::invalid_argument naming what is missing.
inline at::Tensor sdpa_on(const std::string& backend, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (backend == "auto") return sdpa(q, k, v);
  if (backend == "math") {
#if TORCH_VERSION_MAJOR >= 2
    return std::get<0>(at::_scaled_dot_product_attention_math(q, k, v));
#else
    return sdpa(q, k, v);
#endif
  }
#if TORCH_VERSION_MAJOR >= 2
  if (q.is_cuda()) {
    if (backend == "flash") return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v));
    if (backend == "efficient") return std::get<0>(at::_scaled_dot_product_efficient_attention(q, k, v, {}, false));
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    if (backend == "cudnn") return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, {}, false));
#endif
  }
#endif
  throw std::invalid_argument("attention backend '" + backend + "' is not available in this build or on this device");
}

// Attention that also returns the log-sum-exp of each query's scaled scores ([B, heads, L] float32,
// natural log): for merging with more keys outside the call. cuDNN's fused kernel on CUDA builds of
// libtorch 2.5+ (flash where cuDNN refuses the shapes), the math ops elsewhere.
inline std::pair<at::Tensor, at::Tensor> sdpa_with_lse(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  if (q.is_cuda()) {
    try {
      auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, {}, true);
      return {std::get<0>(r), std::get<1>(r).reshape({B, H, L})};
    } catch (const c10::Error&) {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v);
      return {std::get<0>(r), std::get<1>(r).reshape({B, H, L})};
    }
  }
#endif
  const at::Tensor s =
      at::matmul(q.to(at::kFloat), k.to(at::kFloat).transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor lse = at::logsumexp(s, {-1});
  const at::Tensor o = at::matmul(at::exp(s - lse.unsqueeze(-1)), v.to(at::kFloat)).to(q.scalar_type());
  return {o, lse};
}

}  // namespace autooptim::runtime::compat
