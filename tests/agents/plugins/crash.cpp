// A plugin whose code kills its process (issue 42): "crash_linear" dereferences a null pointer on its third
// linear call. In the gate's process that would end the gate; in its generation worker it is only the candidate's
// failure: the gate rejects it and goes on (tests/agents/test_plugin_gate.sh).
#include <atomic>
#include <csignal>

#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct CrashLinearOptions {
  bool on = false;
};

techniques::Technique crash_linear() {
  techniques::Technique t;
  t.name = "crash_linear";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "linear layers that crash the process (red team)";
  t.flags = {techniques::bool_flag("crash_linear", techniques::field(&CrashLinearOptions::on), "turn it on")};
  t.switch_flag = "crash_linear";
  t.hooks = {"linear"};
  t.engagement = {{"kernel.crash_linear.calls", "crash_linear is on but ran no linear layer"}};
  return t;
}

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(crash_linear());
  host.points.linear.add(
      {"crash_linear", 5, [](const RuntimeOptions& o) { return o.of<CrashLinearOptions>().on; },
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         static std::atomic<int> calls{0};
         if (++calls == 3) std::raise(SIGSEGV);
         if (fc) fc->count("kernel.crash_linear.calls");
         return lin->forward(x);
       }});
}
