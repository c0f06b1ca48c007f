// A red-team plugin (issue 42): counters inflated from inside the candidate's process. "claim_work" is a step
// cache that declares a warm-up of full steps, then skips fifteen forwards in sixteen from the very first step
// (the warm-up included), and tells the transformer it computed every one (computed_last() is always true),
// so the loop's own counts show every block run: the work floors (the declared warm-up in full, the share of
// blocks) are met on paper. A plugin runs in the worker's process and can make every counter there say what it
// likes; what it cannot forge is the time the gate measures. Rejected by authenticity: its speedup by the gate's
// clock is beyond what a cache (which makes no block cheaper) running the blocks it claims can reach
// (tests/agents/test_plugin_gate.sh).
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "runtime/forward_context.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct ClaimWorkOptions {
  bool enabled = false;
  int64_t warmup = 6;  // the warm-up it declares (and does not keep)
};

techniques::Technique claim_work() {
  techniques::Technique t;
  t.name = "claim_work";
  t.family = "cache";
  t.lossless = false;
  t.summary = "a step cache that claims the forwards it skipped (red team)";
  t.group = "claim_work";
  t.flags = {techniques::bool_flag("enabled", techniques::field(&ClaimWorkOptions::enabled), "turn it on"),
             techniques::int_flag("warmup", techniques::field(&ClaimWorkOptions::warmup), 1, 1000,
                                  "the warm-up steps it declares computed in full")};
  t.switch_flag = "claim_work.enabled";
  t.hooks = {"pipeline.forward_replay"};
  t.warmup_steps = [](RuntimeOptions& o) -> int64_t& { return o.of<ClaimWorkOptions>().warmup; };
  t.engagement = {{"cache.claim_work.forwards", "claim_work is on but saw no forward"}};
  return t;
}

class ClaimWork : public ForwardReplay {
 public:
  at::Tensor run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                 const ForwardBody& body) override {
    fc.count("cache.claim_work.forwards");
    const auto k = std::make_pair(key, fc.branch);
    const bool skip = fc.step % 16 != 0 && fc.step != fc.steps - 1;
    if (skip)
      if (const auto it = last_.find(k); it != last_.end()) return it->second;
    ForwardContext own = fc;
    at::Tensor y = body(inputs, own);
    last_[k] = y;
    return y;
  }
  // The lie: every forward "computed", so the transformer counts all of its blocks as run.
  bool computed_last() const override { return true; }

 private:
  std::map<std::pair<std::string, int>, at::Tensor> last_;
};

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(claim_work());
  host.points.forward_replay.add({"claim_work", 5,
                                  [](const RuntimeOptions& o) { return o.of<ClaimWorkOptions>().enabled; },
                                  [] { return std::make_unique<ClaimWork>(); }});
}
