#include "runtime/techniques/kernel/timestep_dedup.h"

namespace autooptim::runtime::techniques {

std::pair<at::Tensor, at::Tensor> dedup_time_embedding(
    const at::Tensor& t, const std::function<std::pair<at::Tensor, at::Tensor>(const at::Tensor&)>& embed,
    const ForwardContext* fc) {
  // unique values [U] and, per row, the index of its value [N]
  auto [values, inverse, counts] = at::_unique2(t, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
  auto [a, b] = embed(values);
  if (fc) fc->count("kernel.timestep_dedup.rows_saved", static_cast<double>(t.numel() - values.numel()));
  return {a.index_select(0, inverse.reshape({-1})), b.index_select(0, inverse.reshape({-1}))};
}

}  // namespace autooptim::runtime::techniques
