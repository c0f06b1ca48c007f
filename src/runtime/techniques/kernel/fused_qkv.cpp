#include "runtime/techniques/kernel/fused_qkv.h"

namespace autooptim::runtime::techniques {

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_qkv(const at::Tensor& x, const Linear& q, const Linear& k,
                                                         const Linear& v, FusedQKVWeights& merged,
                                                         const ForwardContext* fc) {
  // Re-merge when the weights were reloaded (a new storage) since the last merge.
  if (!merged.weight.defined() || merged.weight.device() != q->weight.device() ||
      merged.weight.scalar_type() != q->weight.scalar_type()) {
    at::NoGradGuard g;
    merged.weight = at::cat({q->weight, k->weight, v->weight}, 0).contiguous();
    merged.bias = at::cat({q->bias, k->bias, v->bias}, 0).contiguous();
  }
  const at::Tensor qkv = at::linear(x.to(merged.weight.scalar_type()), merged.weight, merged.bias);  // [B, L, 3D]
  auto parts = qkv.chunk(3, -1);
  if (fc) fc->count("kernel.fused_qkv.launches");
  return {parts[0], parts[1], parts[2]};
}

}  // namespace autooptim::runtime::techniques
