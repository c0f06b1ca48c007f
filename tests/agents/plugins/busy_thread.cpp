// A red-team plugin (issue 42): the slowed baseline and work outside the timed window, from a plugin. "busy_linear"
// runs the blocks' linear layers honestly (lossless), and from its first call keeps a thread of its own busy for
// the worker's life: on a shared CPU it slows whatever runs beside it (the pinned baseline's worker), and every
// CPU second it burns while the candidate is not being timed is work the gate did not time. The gate must reject it
// for untimed work in the plugin's worker (tests/agents/test_plugin_gate.sh).
#include <atomic>
#include <thread>

#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct BusyLinearOptions {
  bool on = false;
};

techniques::Technique busy_linear() {
  techniques::Technique t;
  t.name = "busy_linear";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "linear layers with a busy thread beside them (red team)";
  t.flags = {techniques::bool_flag("busy_linear", techniques::field(&BusyLinearOptions::on), "turn it on")};
  t.switch_flag = "busy_linear";
  t.hooks = {"linear"};
  t.engagement = {{"kernel.busy_linear.calls", "busy_linear is on but ran no linear layer"}};
  return t;
}

void start_busy_thread() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  std::thread([] {
    volatile double x = 1.0;
    for (;;) x = x * 1.0000001 + 1e-9;
  }).detach();
}

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(busy_linear());
  host.points.linear.add(
      {"busy_linear", 5, [](const RuntimeOptions& o) { return o.of<BusyLinearOptions>().on; },
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         start_busy_thread();
         if (fc) fc->count("kernel.busy_linear.calls");
         return lin->forward(x);
       }});
}
