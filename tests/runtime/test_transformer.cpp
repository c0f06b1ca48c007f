// WanTransformer3DModel against the reference's golden vectors (float32, CPU, 1e-5 relative L2), plus
// properties that must hold for any config: key set = checkpoint keys, batch independence, per-token
// timesteps equal to the scalar form when all tokens share t.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/forward_context.h"
#include "runtime/options.h"
#include "runtime/trace.h"
#include "runtime/verify.h"
#include "runtime/wan_transformer.h"
#include "test_util.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/kernel/uniform_timestep_options.h"

using namespace autooptim;
using namespace autooptim::runtime;

namespace {

WanTransformerConfig golden_config() {
  return WanTransformerConfig::from_json(
      read_json_file(test::golden_dir() + "/transformer_tiny_weights.json")["config"]);
}

WanTransformer3DModel load_golden_model() {
  WanTransformer3DModel m(golden_config());
  load_strict(*m, TensorSource::open(test::golden_dir() + "/transformer_tiny_weights.safetensors"));
  return m;
}

// A small config beside the golden one: 3 heads x 24 (rope split 8/8/8), patches (1, 2, 2).
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

// Deterministic weights for a config (the values do not matter for the property tests).
void fill_random(torch::nn::Module& m, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::NoGradGuard g;
  for (auto& p : m.parameters()) p.normal_(0.0, 0.05, gen);
}

}  // namespace

TEST(Transformer, ParameterNamesAreTheCheckpointKeys) {
  WanTransformer3DModel m(golden_config());
  const auto src = TensorSource::open(test::golden_dir() + "/transformer_tiny_weights.safetensors");
  std::vector<std::string> ours;
  for (const auto& kv : parameter_shapes(*m)) ours.push_back(kv.first);
  EXPECT_EQ(ours, src.names());
  for (const auto& kv : parameter_shapes(*m)) EXPECT_EQ(kv.second, src.shape(kv.first)) << kv.first;
}

TEST(Transformer, FullSizeConfigHasTheCheckpointParameterCount) {
  // 4,999,787,712 parameters and 825 tensors in Wan2.2-TI2V-5B's transformer. Built on the meta-free
  // path with empty tensors, so no memory is touched beyond the allocation.
  WanTransformer3DModel m(WanTransformerConfig::ti2v_5b(), Precision{at::kBFloat16, at::kCPU});
  int64_t n = 0;
  size_t tensors = 0;
  for (const auto& p : m->parameters()) {
    n += p.numel();
    ++tensors;
  }
  EXPECT_EQ(n, 4999787712LL);
  EXPECT_EQ(tensors, 825u);
  const auto shapes = parameter_shapes(*m);
  EXPECT_EQ(shapes.at("blocks.29.ffn.net.0.proj.weight"), (std::vector<int64_t>{14336, 3072}));
  EXPECT_EQ(shapes.at("condition_embedder.time_proj.weight"), (std::vector<int64_t>{18432, 3072}));
  EXPECT_EQ(shapes.at("patch_embedding.weight"), (std::vector<int64_t>{3072, 48, 1, 2, 2}));
  EXPECT_EQ(shapes.at("proj_out.weight"), (std::vector<int64_t>{192, 3072}));
  // Precision policy: fp32 where the reference keeps fp32.
  for (const auto& p : m->named_parameters()) {
    const auto& k = p.key();
    const bool fp32 = k.find("time_embedder") != std::string::npos ||
                      k.find("scale_shift_table") != std::string::npos || k.find("norm2") != std::string::npos;
    EXPECT_EQ(p.value().scalar_type(), fp32 ? at::kFloat : at::kBFloat16) << k;
  }
}

TEST(Transformer, GoldenOutputAndEveryIntermediate) {
  auto m = load_golden_model();
  const auto io = TensorSource::open(test::golden_dir() + "/transformer_tiny_io.safetensors");
  Intermediates inter;
  at::InferenceMode guard;
  const at::Tensor out = m->forward(io.tensor("hidden_states"), io.tensor("timestep_per_token"),
                                    io.tensor("encoder_hidden_states"), &inter);
  EXPECT_LE(rel_l2(out, io.tensor("output")), 1e-5);
  size_t checked = 0;
  for (const auto& name : io.names()) {
    if (name.rfind("inter.", 0) != 0) continue;
    ASSERT_TRUE(inter.count(name.substr(6))) << name;
    EXPECT_LE(rel_l2(inter.at(name.substr(6)), io.tensor(name)), 1e-5) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 8u);
}

TEST(Transformer, GoldenScalarTimestep) {
  auto m = load_golden_model();
  const auto io = TensorSource::open(test::golden_dir() + "/transformer_tiny_io.safetensors");
  at::InferenceMode guard;
  const at::Tensor out =
      m->forward(io.tensor("hidden_states"), at::tensor({731.25f}), io.tensor("encoder_hidden_states"));
  EXPECT_LE(rel_l2(out, io.tensor("output_scalar_timestep")), 1e-5);
  // And the per-token output is really different (frame 0 at t=0).
  EXPECT_GT(rel_l2(out, io.tensor("output")), 1e-3);
}

TEST(Transformer, BrokenWeightIsCaught) {
  // The golden check must fail when one gain is wrong: guards against a test that always passes.
  auto m = load_golden_model();
  {
    at::NoGradGuard g;
    m->block_list[1]->attn2->norm_k->weight.fill_(1.0);
  }
  const auto io = TensorSource::open(test::golden_dir() + "/transformer_tiny_io.safetensors");
  at::InferenceMode guard;
  const at::Tensor out =
      m->forward(io.tensor("hidden_states"), io.tensor("timestep_per_token"), io.tensor("encoder_hidden_states"));
  EXPECT_GT(rel_l2(out, io.tensor("output")), 1e-4);
}

TEST(Transformer, OtherConfigsBatchAndPerTokenConsistency) {
  // 3 heads x 24 (rope split 8/8/8), 3 layers, batch 2, 5 latent frames: batch rows are independent and
  // a per-token t equal everywhere gives the scalar-t result.
  WanTransformer3DModel m(small_config(3));
  fill_random(*m, 7);
  at::InferenceMode guard;
  const at::Tensor x = at::randn({2, 4, 5, 4, 6});
  const at::Tensor ctx = at::randn({2, 7, 8});
  const at::Tensor t = at::tensor({500.0f, 20.0f});
  const at::Tensor both = m->forward(x, t, ctx);
  EXPECT_EQ(both.sizes(), (std::vector<int64_t>{2, 6, 5, 4, 6}));
  const at::Tensor one = m->forward(x.slice(0, 1, 2), t.slice(0, 1, 2), ctx.slice(0, 1, 2));
  EXPECT_LE(rel_l2(both.slice(0, 1, 2), one), 1e-5);
  const int64_t L = 5 * 2 * 3;
  const at::Tensor per_token = m->forward(x, t.unsqueeze(1).expand({2, L}).contiguous(), ctx);
  EXPECT_LE(rel_l2(per_token, both), 1e-5);
}

// uniform_timestep: a per-token t with one value per sample takes the per-sample path, bit for bit the
// per-token computation with the time embedding deduplicated (the same rows, broadcast instead of gathered);
// a sample with two values (image-to-video's zero on the first frame) is left per token.
TEST(Transformer, UniformTimestepIsThePerTokenResultBitForBit) {
  WanTransformer3DModel m(small_config(2));
  fill_random(*m, 11);
  at::InferenceMode guard;
  const at::Tensor x = at::randn({2, 4, 5, 4, 6});
  const at::Tensor ctx = at::randn({2, 7, 8});
  const int64_t L = 5 * 2 * 3;
  const at::Tensor t_tok = at::tensor({500.0f, 20.0f}).unsqueeze(1).expand({2, L}).contiguous();
  at::Tensor t_i2v = t_tok.clone();
  t_i2v.slice(1, 0, 2 * 3).zero_();  // latent frame 0 (6 tokens) carries the image: timestep 0
  auto run = [&](const at::Tensor& t, bool uniform, Trace& trace) {
    RuntimeOptions o;
    o.of<TimestepDedupOptions>().on = true;
    o.of<UniformTimestepOptions>().on = uniform;
    ForwardContext fc;
    fc.options = &o;
    fc.trace = &trace;
    return m->forward(x, t, ctx, nullptr, &fc);
  };
  Trace off, on, i2v_off, i2v_on;
  const at::Tensor a = run(t_tok, false, off), b = run(t_tok, true, on);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_EQ(on.get("kernel.uniform_timestep.samples"), 2);
  EXPECT_EQ(on.get("kernel.uniform_timestep.rows_saved"), 2 * (L - 1));
  EXPECT_EQ(off.get("kernel.uniform_timestep.samples"), 0);
  const at::Tensor c = run(t_i2v, false, i2v_off), d = run(t_i2v, true, i2v_on);
  EXPECT_TRUE(at::equal(c, d));
  EXPECT_FALSE(at::equal(a, c));  // the image frame's timestep does change the output
  EXPECT_EQ(i2v_on.get("kernel.uniform_timestep.samples"), 0);
}

TEST(Transformer, BadInputsAreClearErrors) {
  WanTransformer3DModel m(golden_config());
  fill_random(*m, 1);
  at::InferenceMode guard;
  const at::Tensor ctx = at::randn({1, 4, 40});
  EXPECT_THROW(m->forward(at::randn({1, 47, 1, 2, 2}), at::tensor({1.0f}), ctx), Error);  // channels
  EXPECT_THROW(m->forward(at::randn({1, 48, 1, 3, 2}), at::tensor({1.0f}), ctx), Error);  // odd height
  EXPECT_THROW(m->forward(at::randn({1, 48, 1, 2, 2}), at::ones({1, 5}), ctx), Error);    // wrong token count
  EXPECT_THROW(m->forward(at::randn({1, 48, 1, 2, 2}), at::tensor({1.0f}), at::randn({1, 4, 39})), Error);
  EXPECT_THROW(WanTransformerConfig::from_json({{"image_dim", 1280}}), Error);
  EXPECT_THROW(WanTransformerConfig::from_json({{"num_layers", "thirty"}}), Error);
  EXPECT_THROW(WanTransformerConfig::from_json({{"qk_norm", "layer_norm"}}), Error);
}

TEST(Verify, GoldenFolderPassesAndJsonShape) {
  VerifyOptions o;
  const auto rep = verify_golden_dir(test::golden_dir(), o);
  ASSERT_FALSE(rep.rows.empty());
  size_t transformer = 0, unipc = 0;
  for (const auto& r : rep.rows) {
    EXPECT_TRUE(r.pass) << r.component << " " << r.tensor << " " << r.rel_l2;
    transformer += r.component == "transformer_tiny";
    unipc += r.component == "unipc";
  }
  EXPECT_EQ(transformer, 10u);  // output, output_scalar_timestep, 8 intermediates
  EXPECT_EQ(unipc, 6u);         // timesteps, sigmas, samples for 4 and 50 steps
}

TEST(Verify, OtherConfigInGoldenLayout) {
  // A golden folder written by us for a different config (batch 2, 3 heads, 4 frames): verify must
  // read the config from the json, not assume the shipped sizes; a corrupted output must fail.
  test::TempDir tmp;
  nlohmann::json cfg = {{"num_attention_heads", 3},
                        {"attention_head_dim", 24},
                        {"in_channels", 4},
                        {"out_channels", 4},
                        {"text_dim", 8},
                        {"freq_dim", 32},
                        {"ffn_dim", 40},
                        {"num_layers", 2}};
  WanTransformer3DModel m(WanTransformerConfig::from_json(cfg));
  fill_random(*m, 3);
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& p : m->named_parameters()) weights.emplace_back(p.key(), p.value());
  write_safetensors(tmp.file("transformer_b2_weights.safetensors"), weights);
  test::write_bytes(tmp.file("transformer_b2_weights.json"), nlohmann::json({{"config", cfg}}).dump());
  const at::Tensor x = at::randn({2, 4, 4, 4, 4}), ctx = at::randn({2, 5, 8});
  const int64_t L = 4 * 2 * 2;
  at::Tensor t = at::full({2, L}, 600.0f);
  t.slice(1, 0, 4).zero_();
  at::Tensor out, out_scalar;
  {
    at::InferenceMode guard;
    out = m->forward(x, t, ctx);
    out_scalar = m->forward(x, at::full({2}, 600.0f), ctx);
  }
  write_safetensors(tmp.file("transformer_b2_io.safetensors"), {{"hidden_states", x},
                                                                {"encoder_hidden_states", ctx},
                                                                {"timestep_per_token", t},
                                                                {"output", out},
                                                                {"output_scalar_timestep", out_scalar}});
  test::write_bytes(tmp.file("transformer_b2_io.json"), "{}");
  auto rep = verify_golden_dir(tmp.path().string(), VerifyOptions{});
  ASSERT_EQ(rep.rows.size(), 2u);
  EXPECT_TRUE(rep.all_pass());

  write_safetensors(tmp.file("transformer_b2_io.safetensors"), {{"hidden_states", x},
                                                                {"encoder_hidden_states", ctx},
                                                                {"timestep_per_token", t},
                                                                {"output", out * 1.001},
                                                                {"output_scalar_timestep", out_scalar}});
  rep = verify_golden_dir(tmp.path().string(), VerifyOptions{});
  EXPECT_FALSE(rep.all_pass());
  EXPECT_FALSE(rep.rows[0].pass);
  EXPECT_TRUE(rep.rows[1].pass);
}
