// Kernel technique: the attention kernel (cuDNN, flash, memory-efficient, math) for the transformer's
// self- and cross-attention. Off ("auto") is libtorch's own dispatch.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/attention_backend_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(attention_backend) {
  Technique t;
  t.name = "attention_backend";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "the attention kernel for self- and cross-attention (libtorch's dispatch when auto)";
  t.flags = always_written({choice_flag("attention_backend", field(&AttentionBackendOptions::backend),
                                        {"auto", "math", "flash", "efficient", "cudnn"},
                                        "auto | math | flash | efficient | cudnn (what the build has)")});
  t.switch_flag = "attention_backend";
  t.hooks = {"attention"};
  t.engagement = {{"kernel.attention.<attention_backend>.calls",
                   "attention_backend <attention_backend> is set but no attention ran on it"}};
  t.search = [](const SearchContext& c) {
    std::vector<SearchPoint> p;
    if (c.gpu)
      for (const char* b : {"cudnn", "flash"})
        p.push_back({std::string("attention_backend-") + b, {{"attention_backend", b}}});
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include <optional>
#include <stdexcept>

#include "base/error.h"
#include "runtime/techniques/kernel/attention_backend.h"
#include "runtime/techniques/kernel/hopper_attention.h"
#include "runtime/torch_compat.h"

namespace autooptim::runtime::techniques {

namespace {

// The attention on the chosen backend; nullopt when it is libtorch's own choice ("auto").
std::optional<at::Tensor> on_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->of<AttentionBackendOptions>().backend == "auto") return std::nullopt;
  const std::string& b = fc->options->of<AttentionBackendOptions>().backend;
  try {
    at::Tensor out = compat::sdpa_on(b, q, k, v);
    fc->count(("kernel.attention." + b + ".calls").c_str());
    return out;
  } catch (const std::invalid_argument& e) {
    throw Error(e.what());
  }
}

}  // namespace

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext* fc) {
  if (hopper_attention_applies(q, k, v, fc)) return hopper_attention(q, k, v, fc);
  if (auto out = on_backend(q, k, v, fc)) return *out;
  return compat::sdpa(q, k, v);
}

// The chosen kernel at the attention point (the sm_90a kernel, a higher override, takes what it can first).
AUTOOPTIM_EXTENSIONS(attention_backend) {
  points.attention.add({"attention_backend", 10,
                        [](const RuntimeOptions& o) { return o.of<AttentionBackendOptions>().backend != "auto"; },
                        [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const ForwardContext* fc) -> std::optional<at::Tensor> { return on_backend(q, k, v, fc); }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
