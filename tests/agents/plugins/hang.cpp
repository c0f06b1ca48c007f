// A plugin whose code never returns (issue 42): "hang_linear" sleeps forever in its third linear call. The gate
// gives a plugin's generation --plugin-run-timeout seconds, then fails that run and kills the worker; the runs
// after it fail at once: a rejection in bounded time (tests/agents/test_plugin_gate.sh).
#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct HangLinearOptions {
  bool on = false;
};

techniques::Technique hang_linear() {
  techniques::Technique t;
  t.name = "hang_linear";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "linear layers that never return (red team)";
  t.flags = {techniques::bool_flag("hang_linear", techniques::field(&HangLinearOptions::on), "turn it on")};
  t.switch_flag = "hang_linear";
  t.hooks = {"linear"};
  t.engagement = {{"kernel.hang_linear.calls", "hang_linear is on but ran no linear layer"}};
  return t;
}

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(hang_linear());
  host.points.linear.add(
      {"hang_linear", 5, [](const RuntimeOptions& o) { return o.of<HangLinearOptions>().on; },
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         static std::atomic<int> calls{0};
         if (++calls == 3)
           for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
         if (fc) fc->count("kernel.hang_linear.calls");
         return lin->forward(x);
       }});
}
