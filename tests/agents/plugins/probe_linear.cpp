// An honest technique plugin (issue 42): "probe_linear" runs the blocks' linear layers itself, with the op the
// model's reference uses, and counts them. Lossless by construction: its clip must be the baseline's bit for
// bit, and its counter proves that it engaged. Built by `autooptim agent build` in tests/agents/test_plugins.sh.
#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct ProbeLinearOptions {
  bool on = false;
};

techniques::Technique probe_linear() {
  techniques::Technique t;
  t.name = "probe_linear";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "runs the blocks' linear layers itself (a plugin's example)";
  t.flags = {techniques::bool_flag("probe_linear", techniques::field(&ProbeLinearOptions::on),
                                   "run the blocks' linear layers through the plugin")};
  t.switch_flag = "probe_linear";
  t.hooks = {"linear"};
  t.engagement = {{"kernel.probe_linear.calls", "probe_linear is on but ran no linear layer"}};
  return t;
}

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(probe_linear());
  host.points.linear.add(
      {"probe_linear", 5, [](const RuntimeOptions& o) { return o.of<ProbeLinearOptions>().on; },
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         if (fc) fc->count("kernel.probe_linear.calls");
         return lin->forward(x);
       }});
}
