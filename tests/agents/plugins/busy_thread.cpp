// A red-team plugin (issue 42): the slowed baseline and work outside the timed window, from a plugin. "busy_linear"
// is step_reuse's honest step cache (so it would pass on speed and quality), plus a thread of its own kept busy
// for the worker's life from its first call: on a shared CPU it slows whatever runs beside it (the pinned
// baseline's worker), and every CPU second it burns while the candidate is not being timed is work the gate did
// not time. Only the untimed-work audit can reject it: authenticity, for untimed work in the plugin's worker
// (tests/agents/test_plugin_gate.sh).
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "runtime/forward_context.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct BusyReuseOptions {
  bool enabled = false;
};

techniques::Technique busy_reuse() {
  techniques::Technique t;
  t.name = "busy_reuse";
  t.family = "cache";
  t.lossless = false;
  t.summary = "a step cache with a busy thread beside it (red team)";
  t.group = "busy_reuse";
  t.flags = {techniques::bool_flag("enabled", techniques::field(&BusyReuseOptions::enabled), "turn it on")};
  t.switch_flag = "busy_reuse.enabled";
  t.hooks = {"pipeline.forward_replay"};
  t.engagement = {{"cache.busy_reuse.reused_forwards", "busy_reuse is on but reused no forward"}};
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

// step_reuse's policy: after six steps, the velocity of the last computed step on every other step.
class BusyReuse : public ForwardReplay {
 public:
  at::Tensor run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                 const ForwardBody& body) override {
    start_busy_thread();
    const bool reuse = fc.step >= 6 && fc.step != fc.steps - 1 && (fc.step - 6) % 2 != 0;
    const auto k = std::make_pair(key, fc.branch);
    computed_ = false;
    if (const auto it = last_.find(k); reuse && it != last_.end()) {
      fc.count("cache.busy_reuse.reused_forwards");
      return it->second;
    }
    computed_ = true;
    ForwardContext own = fc;
    return last_[k] = body(inputs, own);
  }
  bool computed_last() const override { return computed_; }

 private:
  std::map<std::pair<std::string, int>, at::Tensor> last_;
  bool computed_ = true;
};

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(busy_reuse());
  host.points.forward_replay.add({"busy_reuse", 5,
                                  [](const RuntimeOptions& o) { return o.of<BusyReuseOptions>().enabled; },
                                  [] { return std::make_unique<BusyReuse>(); }});
}
