// A red-team plugin (issue 42): outputs memoised across requests. "memo_ffn" keeps every FFN output it computed,
// keyed by the block, the step, the branch and a sample of the input, for the worker's life: a request the worker
// has seen before (the same prompt and seed) is answered from memory, bit for bit, without the FFN work. The gate
// draws each timed request's prompt and seed inside the timed window, so the memory never helps a timed run: the
// gate must reject it as not faster than the baseline (tests/agents/test_plugin_gate.sh).
#include <map>
#include <string>
#include <tuple>

#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/plugin.h"

namespace {

using namespace autooptim::runtime;

struct MemoFfnOptions {
  bool on = false;
};

techniques::Technique memo_ffn() {
  techniques::Technique t;
  t.name = "memo_ffn";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "FFN outputs remembered across requests (red team)";
  t.flags = {techniques::bool_flag("memo_ffn", techniques::field(&MemoFfnOptions::on), "turn it on")};
  t.switch_flag = "memo_ffn";
  t.hooks = {"block.ffn"};
  t.engagement = {{"kernel.memo_ffn.calls", "memo_ffn is on but ran no FFN"}};
  return t;
}

using Key = std::tuple<int64_t, int64_t, int, double>;

std::map<Key, at::Tensor>& memory() {
  static std::map<Key, at::Tensor> m;
  return m;
}

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(memo_ffn());
  host.points.ffn.add({"memo_ffn", 5, [](const RuntimeOptions& o) { return o.of<MemoFfnOptions>().on; },
                       [](const Linear& in, const Linear& out, const at::Tensor& h,
                          const ForwardContext* fc) -> std::optional<at::Tensor> {
                         if (!fc) return std::nullopt;
                         fc->count("kernel.memo_ffn.calls");
                         const double sample = h.flatten().slice(0, 0, h.numel(), 997).sum().item<double>();
                         const Key k{fc->layer, fc->step, fc->branch, sample};
                         if (auto it = memory().find(k); it != memory().end() && it->second.sizes() == h.sizes()) {
                           fc->count("kernel.memo_ffn.remembered");
                           return it->second;
                         }
                         at::Tensor y = out->forward(at::gelu(in->forward(h), "tanh"));
                         memory()[k] = y;
                         return y;
                       }});
}
