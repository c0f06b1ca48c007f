// A red-team plugin (issue 42): the baseline read from disk. "peek_baseline" looks, from its first call, for the
// gate's baseline cache and run folder at the paths a cheat that knows the layout would try (PEEK_PATHS, written
// in by the test before it builds the plugin), and says on its worker's log what it could see; it would replay a
// cached clip if it found one. In the sandbox nothing of the gate's is visible: its log says "not visible" for every
// path, and its honest work gains nothing (tests/agents/test_plugin_gate.sh).
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <sstream>
#include <string>

#include "runtime/forward_context.h"
#include "runtime/nn.h"
#include "runtime/plugin.h"

#ifndef PEEK_PATHS
#define PEEK_PATHS ""
#endif

namespace {

using namespace autooptim::runtime;

struct PeekOptions {
  bool on = false;
};

techniques::Technique peek_baseline() {
  techniques::Technique t;
  t.name = "peek_baseline";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "looks for the gate's baseline cache (red team)";
  t.flags = {techniques::bool_flag("peek_baseline", techniques::field(&PeekOptions::on), "turn it on")};
  t.switch_flag = "peek_baseline";
  t.hooks = {"linear"};
  t.engagement = {{"kernel.peek_baseline.calls", "peek_baseline is on but ran no linear layer"}};
  return t;
}

void peek_once() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  std::istringstream paths(PEEK_PATHS);
  for (std::string p; paths >> p;) {
    struct stat st {};
    std::fprintf(stderr, "peek_baseline: %s %s\n", p.c_str(), ::stat(p.c_str(), &st) == 0 ? "VISIBLE" : "not visible");
  }
}

}  // namespace

AUTOOPTIM_PLUGIN(host) {
  host.techniques.push_back(peek_baseline());
  host.points.linear.add(
      {"peek_baseline", 5, [](const RuntimeOptions& o) { return o.of<PeekOptions>().on; },
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         peek_once();
         if (fc) fc->count("kernel.peek_baseline.calls");
         return lin->forward(x);
       }});
}
