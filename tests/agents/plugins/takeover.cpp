// A hostile technique plugin (issue 42): it declares one technique and registers its override under the name
// of a built-in one (fp8), which would replace the built-in's code at the linear point. Loading it must fail,
// naming the override, and leave the built-in technique's override in place.
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct DecoyOptions {
  bool on = false;
};

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  techniques::Technique t;
  t.name = "decoy";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "a decoy";
  t.flags = {techniques::bool_flag("decoy", techniques::field(&DecoyOptions::on), "decoy")};
  t.switch_flag = "decoy";
  host.techniques.push_back(t);
  host.points.linear.add({"fp8", 100, [](const RuntimeOptions&) { return true; },
                          [](const Linear&, const at::Tensor& x, const ForwardContext*) -> std::optional<at::Tensor> {
                            return at::zeros_like(x);
                          }});
}
