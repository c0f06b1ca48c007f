// An honest technique plugin of the cache family (issue 42), as a scripted agent would write one: "step_reuse"
// computes the transformer on one denoising step in `interval` after a warm-up and, on the steps between, hands
// the sampler the velocity of the last computed step of the same CFG branch (the last step computed in full). It
// works through the pipeline.forward_replay point: the runner of the transformer's body decides to run it or not.
// Lossy by design, real work saved, honest counters (a skipped forward runs no block, and says so).
// Tripwire: with AUTOOPTIM_PLUGIN_TRIPWIRE set, loading it anywhere but in a generation worker aborts the
// process, so a test proves the gate never loads it (tests/agents/test_plugin_gate.sh).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "runtime/forward_context.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct StepReuseOptions {
  bool enabled = false;
  int64_t warmup = 6;    // steps computed in full first
  int64_t interval = 2;  // then the transformer runs on one step in this many
};

techniques::Technique step_reuse() {
  techniques::Technique t;
  t.name = "step_reuse";
  t.family = "cache";
  t.lossless = false;
  t.summary = "reuses the transformer's velocity across denoising steps (a plugin's example)";
  t.group = "step_reuse";
  t.flags = {techniques::bool_flag("enabled", techniques::field(&StepReuseOptions::enabled), "turn the reuse on"),
             techniques::int_flag("warmup", techniques::field(&StepReuseOptions::warmup), 1, 1000,
                                  "steps computed in full before the first reuse"),
             techniques::int_flag("interval", techniques::field(&StepReuseOptions::interval), 2, 100,
                                  "after the warm-up, run the transformer on one step in this many")};
  t.switch_flag = "step_reuse.enabled";
  t.hooks = {"pipeline.forward_replay"};
  t.engagement = {{"cache.step_reuse.reused_forwards", "step_reuse is on but reused no forward"}};
  return t;
}

// One generation's runner: the last computed output of each (body key, CFG branch).
class StepReuse : public ForwardReplay {
 public:
  at::Tensor run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                 const ForwardBody& body) override {
    const StepReuseOptions& o = fc.options->of<StepReuseOptions>();
    const bool reuse = fc.step >= o.warmup && fc.step != fc.steps - 1 && (fc.step - o.warmup) % o.interval != 0;
    const auto k = std::make_pair(key, fc.branch);
    computed_ = false;
    if (reuse) {
      if (const auto it = last_.find(k); it != last_.end()) {
        fc.count("cache.step_reuse.reused_forwards");
        return it->second;
      }
    }
    computed_ = true;
    fc.count("cache.step_reuse.computed_forwards");
    ForwardContext own = fc;
    at::Tensor y = body(inputs, own);
    last_[k] = y;
    return y;
  }
  bool computed_last() const override { return computed_; }

 private:
  std::map<std::pair<std::string, int>, at::Tensor> last_;
  bool computed_ = true;
};

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  if (std::getenv("AUTOOPTIM_PLUGIN_TRIPWIRE") && !std::getenv("AUTOOPTIM_GENERATION_WORKER")) {
    std::fprintf(stderr, "TRIPWIRE: step_reuse was loaded outside a generation worker\n");
    std::abort();
  }
  host.techniques.push_back(step_reuse());
  host.points.forward_replay.add({"step_reuse", 5,
                                  [](const RuntimeOptions& o) { return o.of<StepReuseOptions>().enabled; },
                                  [] { return std::make_unique<StepReuse>(); }});
}
