// The extension points: a technique that exists only in this test binary plugs into the transformer
// through a point and engages in a real forward of a small synthetic model, with no file of the runtime
// knowing it (its options, too, are its own struct, stored in RuntimeOptions by type); the registry
// resolves overrides by predicate and priority, and an override may decline.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/extension_points.h"
#include "runtime/forward_context.h"
#include "runtime/options.h"
#include "runtime/trace.h"
#include "runtime/wan_transformer.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"

using namespace autooptim::runtime;

namespace {

// 3 heads x 24 (rope split 8/8/8), patches (1, 2, 2), as tests/runtime/test_transformer.cpp's small config.
WanTransformerConfig small_config(int64_t layers) {
  return WanTransformerConfig::from_json({{"num_attention_heads", 3},
                                          {"attention_head_dim", 24},
                                          {"in_channels", 4},
                                          {"out_channels", 6},
                                          {"text_dim", 8},
                                          {"freq_dim", 32},
                                          {"ffn_dim", 40},
                                          {"num_layers", layers},
                                          {"patch_size", {1, 2, 2}}});
}

WanTransformer3DModel small_model(int64_t layers) {
  WanTransformer3DModel m(small_config(layers));
  auto gen = at::detail::createCPUGenerator(11);
  at::NoGradGuard g;
  for (auto& p : m->parameters()) p.normal_(0.0, 0.05, gen);
  return m;
}

// The test technique's own options, stored in RuntimeOptions like every built-in technique's: a technique adds
// its options with no file of the runtime changed.
struct ProbeOptions {
  bool on = false;
};
const ext::Predicate kProbeOn = [](const RuntimeOptions& o) { return o.of<ProbeOptions>().on; };

RuntimeOptions probe_on() {
  RuntimeOptions o;
  o.of<ProbeOptions>().on = true;
  return o;
}

// Adds an override for the scope of a test; removes it after.
template <typename Fn>
struct Scoped {
  ext::Point<Fn>& point;
  std::string technique;
  Scoped(ext::Point<Fn>& p, typename ext::Point<Fn>::Override o) : point(p), technique(o.technique) {
    p.add(std::move(o));
  }
  ~Scoped() { point.remove(technique); }
};

struct Inputs {
  at::Tensor x = at::randn({1, 4, 3, 4, 4});  // [B, Cin, F, H, W] -> 3 * 2 * 2 = 12 tokens
  at::Tensor t = at::tensor({600.0f});
  at::Tensor ctx = at::randn({1, 5, 8});
};

// `options`: every built-in technique off (the baseline), the test technique on where probe_on() says so.
at::Tensor forward(WanTransformer3DModel& m, const Inputs& in, const RuntimeOptions& options, Trace* trace,
                   WorkCount* work = nullptr) {
  ForwardContext fc;
  fc.options = &options;
  fc.trace = trace;
  fc.work = work;
  return m->forward(in.x, in.t, in.ctx, nullptr, &fc);
}

template <typename Fn>
std::vector<std::string> registered(const ext::Point<Fn>& p) {
  std::vector<std::string> out;
  for (const auto& o : p.overrides()) out.push_back(o.technique);
  return out;
}

}  // namespace

TEST(ExtensionPoints, TestOnlyLinearEngagesInAForwardAndKeepsTheResult) {
  auto m = small_model(2);
  at::InferenceMode guard;
  const Inputs in;
  const at::Tensor reference = m->forward(in.x, in.t, in.ctx);
  Scoped<ext::LinearFn> probe(
      ext::points().linear,
      {"test_probe_linear", 1000, kProbeOn,
       [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) -> std::optional<at::Tensor> {
         fc->count("test.probe_linear.calls");
         return lin->forward(x);  // the reference's own op: the output must not move
       }});
  Trace trace;
  WorkCount work;
  const at::Tensor out = forward(m, in, probe_on(), &trace, &work);
  // Per block: self-attention q, k, v, out; cross-attention q, k, v, out; the FFN's two projections.
  EXPECT_EQ(trace.get("test.probe_linear.calls"), 2 * 10);
  EXPECT_EQ(work.blocks, 2);
  EXPECT_TRUE(at::equal(out, reference));

  Trace off;
  forward(m, in, RuntimeOptions{}, &off);  // its predicate off: resolved out of the forward
  EXPECT_EQ(off.get("test.probe_linear.calls"), 0);
}

TEST(ExtensionPoints, TestOnlyNormModulateChangesTheOutput) {
  auto m = small_model(2);
  at::InferenceMode guard;
  const Inputs in;
  const at::Tensor reference = m->forward(in.x, in.t, in.ctx);
  Scoped<ext::NormModulateFn> probe(ext::points().norm_modulate,
                                    {"test_probe_norm_modulate", 1000, kProbeOn,
                                     [](const at::Tensor& x, const at::Tensor&, const at::Tensor&, int, int, double,
                                        const ForwardContext* fc) -> std::optional<at::Tensor> {
                                       fc->count("test.probe_norm_modulate.calls");
                                       return at::zeros_like(x);  // no modulated input at all: the blocks see zeros
                                     }});
  Trace trace;
  const at::Tensor out = forward(m, in, probe_on(), &trace);
  EXPECT_EQ(trace.get("test.probe_norm_modulate.calls"), 2 * 2);  // norm1 and the FFN's norm, per block
  EXPECT_FALSE(at::allclose(out, reference));
  // Its predicate off: the reference again.
  EXPECT_TRUE(at::equal(forward(m, in, RuntimeOptions{}, nullptr), reference));
}

TEST(ExtensionPoints, AnOverrideThatDeclinesHandsTheCallOn) {
  auto m = small_model(1);
  at::InferenceMode guard;
  const Inputs in;
  const at::Tensor reference = m->forward(in.x, in.t, in.ctx);
  Scoped<ext::GateResidualFn> first(ext::points().gate_residual,
                                    {"test_declines", 2000, kProbeOn,
                                     [](const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, int,
                                        const ForwardContext* fc) -> std::optional<at::Tensor> {
                                       fc->count("test.declined");
                                       return std::nullopt;
                                     }});
  Scoped<ext::GateResidualFn> second(ext::points().gate_residual,
                                     {"test_takes", 1000, kProbeOn,
                                      [](const at::Tensor& res, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         int, const ForwardContext* fc) -> std::optional<at::Tensor> {
                                        fc->count("test.taken");
                                        return res;  // the branch dropped
                                      }});
  Trace trace;
  const at::Tensor out = forward(m, in, probe_on(), &trace);
  EXPECT_EQ(trace.get("test.declined"), 2);  // the attention's and the FFN's residual
  EXPECT_EQ(trace.get("test.taken"), 2);
  EXPECT_FALSE(at::allclose(out, reference));
}

TEST(ExtensionPoints, ResolutionFollowsPredicateAndPriority) {
  ext::Point<int> p("test.point");
  p.add({"low", 1, [](const RuntimeOptions&) { return true; }, 1});
  p.add({"high", 5, [](const RuntimeOptions& o) { return o.of<FusedQkvOptions>().on; }, 5});
  p.add({"mid", 3, [](const RuntimeOptions&) { return true; }, 3});
  RuntimeOptions o;
  auto on = p.resolve(&o);
  ASSERT_EQ(on.size(), 2u);
  EXPECT_EQ(*on[0], 3);
  EXPECT_EQ(*on[1], 1);
  o.of<FusedQkvOptions>().on = true;
  on = p.resolve(&o);
  ASSERT_EQ(on.size(), 3u);
  EXPECT_EQ(*on[0], 5);
  EXPECT_TRUE(p.resolve(nullptr).empty());                           // no options: the reference
  p.add({"mid", 9, [](const RuntimeOptions&) { return true; }, 9});  // a technique's second add replaces its first
  on = p.resolve(&o);
  ASSERT_EQ(on.size(), 3u);
  EXPECT_EQ(*on[0], 9);
}

// A runner of the forward's body made at pipeline.forward_replay (as cuda_graph's is): the model hands it the
// body and its inputs under one key per shape and prompt, and keeps its result.
TEST(ExtensionPoints, TestOnlyForwardReplayRunsTheBody) {
  struct CountingReplay : ForwardReplay {
    std::vector<std::string> keys;
    at::Tensor run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                   const ForwardBody& body) override {
      keys.push_back(key);
      fc.count("test.probe_replay.runs");
      ForwardContext local = fc;
      return body(inputs, local);
    }
  };
  CountingReplay* made = nullptr;
  Scoped<ext::ForwardReplayFactory> probe(ext::points().forward_replay,
                                          {"test_probe_replay", 1000, kProbeOn, [&made] {
                                             auto r = std::make_unique<CountingReplay>();
                                             made = r.get();
                                             return std::unique_ptr<ForwardReplay>(std::move(r));
                                           }});
  EXPECT_EQ(ext::make_forward_replay(RuntimeOptions{}), nullptr);  // its predicate off: no replay
  const RuntimeOptions on = probe_on();
  const std::unique_ptr<ForwardReplay> replay = ext::make_forward_replay(on);
  ASSERT_NE(replay, nullptr);
  ASSERT_EQ(made, replay.get());

  auto m = small_model(2);
  at::InferenceMode guard;
  const Inputs in;
  const at::Tensor reference = m->forward(in.x, in.t, in.ctx);
  Trace trace;
  ForwardContext fc;
  fc.options = &on;
  fc.trace = &trace;
  fc.replay = replay.get();
  const at::Tensor first = m->forward(in.x, in.t, in.ctx, nullptr, &fc);
  const at::Tensor second = m->forward(in.x, in.t, in.ctx, nullptr, &fc);
  EXPECT_EQ(trace.get("test.probe_replay.runs"), 2);
  ASSERT_EQ(made->keys.size(), 2u);
  EXPECT_EQ(made->keys[0], made->keys[1]);  // one shape and prompt: one key
  EXPECT_TRUE(at::equal(first, reference));
  EXPECT_TRUE(at::equal(second, reference));
}

TEST(ExtensionPoints, BuiltInTechniquesRegisterFromTheirOwnFiles) {
  const auto& pts = ext::points();
  auto has = [](const std::vector<std::string>& v, const char* name) {
    return std::count(v.begin(), v.end(), name) == 1;
  };
  EXPECT_TRUE(has(registered(pts.linear), "fp8"));
  EXPECT_TRUE(has(registered(pts.linear), "gemm_autotune"));
  EXPECT_TRUE(has(registered(pts.qkv), "fused_qkv"));
  EXPECT_TRUE(has(registered(pts.norm_modulate), "fused_norm_modulate"));
  EXPECT_TRUE(has(registered(pts.gate_residual), "fused_gate_residual"));
  EXPECT_TRUE(has(registered(pts.qk_norm_rope), "fused_qk_norm_rope"));
  EXPECT_TRUE(has(registered(pts.attention), "attention_backend"));
  EXPECT_TRUE(has(registered(pts.sparse_attention), "sparse"));
  EXPECT_TRUE(has(registered(pts.time_embedding), "timestep_dedup"));
  EXPECT_TRUE(has(registered(pts.rope_tables), "rope_cache"));
  EXPECT_TRUE(has(registered(pts.forward_replay), "cuda_graph"));
  // fused_qkv's merged GEMM runs before fp8's three at the q/k/v point.
  EXPECT_EQ(registered(pts.qkv).front(), "fused_qkv");
}
