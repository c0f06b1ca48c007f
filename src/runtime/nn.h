#pragma once
// Small building blocks whose registered parameter names are the checkpoint's. Parameters are created
// uninitialised (at::empty) on the requested device and dtype: a loader or the synthetic-weight
// generator fills them, so a 5 B-parameter model costs no init time.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

namespace autooptim::runtime {

// Creates and registers a parameter that never requires grad (inference only).
at::Tensor add_param(torch::nn::Module& m, const std::string& name, at::IntArrayRef shape,
                     const at::TensorOptions& opts);

// A plain container whose children are named "0", "1", ... like torch.nn.ModuleList / Sequential.
class ListImpl : public torch::nn::Module {
 public:
  template <typename M>
  M add(const std::string& index, M module) {
    return register_module(index, std::move(module));
  }
};
TORCH_MODULE(List);

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, const at::TensorOptions& opts);
  // x [..., in] -> [..., out] in the weight's dtype.
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined
};
TORCH_MODULE(Linear);

// torch.nn.RMSNorm over the last dim with a gain: x * rsqrt(mean(x^2) + eps) * weight, statistics fp32.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// LayerNorm over the last dim computed in float32 (diffusers FP32LayerNorm); affine when weight is set.
// Returns float32.
at::Tensor layer_norm_fp32(const at::Tensor& x, double eps, const at::Tensor& weight = {}, const at::Tensor& bias = {});

class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, const at::TensorOptions& opts);
  at::Tensor forward(const at::Tensor& x) const { return layer_norm_fp32(x, eps, weight, bias); }
  at::Tensor weight, bias;
  double eps;
};
TORCH_MODULE(LayerNorm);

// Conv3d with weight [out, in, kt, kh, kw] and bias [out].
class Conv3dImpl : public torch::nn::Module {
 public:
  Conv3dImpl(int64_t in, int64_t out, std::vector<int64_t> kernel, const at::TensorOptions& opts,
             std::vector<int64_t> stride = {1, 1, 1}, std::vector<int64_t> padding = {0, 0, 0}, bool bias = true);
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight, bias;
  std::vector<int64_t> stride, padding;
};
TORCH_MODULE(Conv3d);

// Conv2d with weight [out, in, kh, kw] and bias [out].
class Conv2dImpl : public torch::nn::Module {
 public:
  Conv2dImpl(int64_t in, int64_t out, std::vector<int64_t> kernel, const at::TensorOptions& opts,
             std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0}, bool bias = true);
  at::Tensor forward(const at::Tensor& x) const;
  at::Tensor weight, bias;
  std::vector<int64_t> stride, padding;
};
TORCH_MODULE(Conv2d);

// GELU with the tanh approximation, as diffusers' "gelu-approximate" and T5's gelu_new.
at::Tensor gelu_tanh(const at::Tensor& x);

// Relative L2 error ||a - b|| / ||b|| in float64; +inf when a has a NaN/Inf or shapes differ.
double rel_l2(const at::Tensor& a, const at::Tensor& b);

}  // namespace autooptim::runtime
