#include "runtime/techniques/kernel/attention_backend.h"

#include <stdexcept>
#include <string>

#include "runtime/error.h"
#include "runtime/torch_compat.h"

namespace autooptim::runtime::techniques {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->attention_backend == "auto") return compat::sdpa(q, k, v);
  const std::string& b = fc->options->attention_backend;
  try {
    at::Tensor out = compat::sdpa_on(b, q, k, v);
    fc->count(("kernel.attention." + b + ".calls").c_str());
    return out;
  } catch (const std::invalid_argument& e) {
    throw Error(e.what());
  }
}

}  // namespace autooptim::runtime::techniques
