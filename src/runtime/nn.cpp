#include "runtime/nn.h"

#include <cmath>

#include "runtime/torch_compat.h"
#include <limits>

namespace autooptim::runtime {

at::Tensor add_param(torch::nn::Module& m, const std::string& name, at::IntArrayRef shape,
                     const at::TensorOptions& opts) {
  return m.register_parameter(name, at::empty(shape, opts), /*requires_grad=*/false);
}

LinearImpl::LinearImpl(int64_t in, int64_t out, bool has_bias, const at::TensorOptions& opts) {
  weight = add_param(*this, "weight", {out, in}, opts);
  if (has_bias) bias = add_param(*this, "bias", {out}, opts);
}

at::Tensor LinearImpl::forward(const at::Tensor& x) const {
  return at::linear(x.to(weight.scalar_type()), weight, bias);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_in, const at::TensorOptions& opts) : eps(eps_in) {
  weight = add_param(*this, "weight", {dim}, opts);
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) const { return compat::rms_norm(x, weight, eps); }

at::Tensor layer_norm_fp32(const at::Tensor& x, double eps, const at::Tensor& weight, const at::Tensor& bias) {
  const at::Tensor xf = x.to(at::kFloat);
  const int64_t d = xf.size(-1);
  return at::layer_norm(xf, {d}, weight.defined() ? weight.to(at::kFloat) : at::Tensor(),
                        bias.defined() ? bias.to(at::kFloat) : at::Tensor(), eps);
}

LayerNormImpl::LayerNormImpl(int64_t dim, double eps_in, const at::TensorOptions& opts) : eps(eps_in) {
  weight = add_param(*this, "weight", {dim}, opts);
  bias = add_param(*this, "bias", {dim}, opts);
}

Conv3dImpl::Conv3dImpl(int64_t in, int64_t out, std::vector<int64_t> k, const at::TensorOptions& opts,
                       std::vector<int64_t> stride_in, std::vector<int64_t> padding_in, bool has_bias)
    : stride(std::move(stride_in)), padding(std::move(padding_in)) {
  weight = add_param(*this, "weight", {out, in, k.at(0), k.at(1), k.at(2)}, opts);
  if (has_bias) bias = add_param(*this, "bias", {out}, opts);
}

at::Tensor Conv3dImpl::forward(const at::Tensor& x) const {
  return at::conv3d(x.to(weight.scalar_type()), weight, bias, stride, padding);
}

Conv2dImpl::Conv2dImpl(int64_t in, int64_t out, std::vector<int64_t> k, const at::TensorOptions& opts,
                       std::vector<int64_t> stride_in, std::vector<int64_t> padding_in, bool has_bias)
    : stride(std::move(stride_in)), padding(std::move(padding_in)) {
  weight = add_param(*this, "weight", {out, in, k.at(0), k.at(1)}, opts);
  if (has_bias) bias = add_param(*this, "bias", {out}, opts);
}

at::Tensor Conv2dImpl::forward(const at::Tensor& x) const {
  return at::conv2d(x.to(weight.scalar_type()), weight, bias, stride, padding);
}

at::Tensor gelu_tanh(const at::Tensor& x) { return at::gelu(x, "tanh"); }

double rel_l2(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  const at::Tensor ad = a.detach().to(at::kCPU, at::kDouble);
  const at::Tensor bd = b.detach().to(at::kCPU, at::kDouble);
  if (!at::isfinite(ad).all().item<bool>()) return std::numeric_limits<double>::infinity();
  const double num = (ad - bd).norm().item<double>();
  const double den = bd.norm().item<double>();
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return num / den;
}

}  // namespace autooptim::runtime
