// Two experts (the A14B pipelines) on wan22-tiny-moe: each step runs the expert its timestep gives, with
// that expert's guidance scale; the channel-conditioned feed of image-to-video; and no cache policy
// reuses across the switch (a policy starts afresh with the second expert).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "runtime/denoise_feed.h"
#include "runtime/models.h"
#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/techniques/cache/first_block_cache_options.h"
#include "runtime/techniques/cache/forced_skip_options.h"
#include "runtime/unipc_scheduler.h"
#include "runtime/verify.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::runtime;

namespace {

constexpr int64_t kSteps = 8;

LoadedModel tiny_moe() {
  LoadRequest r;
  r.model = "wan22-tiny-moe";
  r.synthetic_weights = true;
  return load_model(r);
}

DenoiseInputs inputs(double guidance, double guidance_2) {
  auto gen = at::detail::createCPUGenerator(11);
  DenoiseInputs in;
  in.latents = at::randn({1, 16, 3, 4, 6}, gen, at::kFloat);
  in.prompt_embeds = at::randn({1, 8, 64}, gen, at::kFloat);
  in.negative_embeds = at::randn({1, 8, 64}, gen, at::kFloat);
  in.steps = kSteps;
  in.guidance = guidance;
  in.guidance_2 = guidance_2;
  return in;
}

// The first step the second expert runs (the timesteps are the pipeline's scheduler's).
int64_t switch_step(WanPipeline& pipe) {
  UniPCScheduler s(configs_of(models::model_facts("wan22-tiny-moe")).scheduler);
  s.set_timesteps(kSteps);
  for (int64_t i = 0; i < kSteps; ++i)
    if (pipe.expert_for(static_cast<double>(s.timesteps()[static_cast<size_t>(i)])) == 1) return i;
  return kSteps;
}

bool same(const at::Tensor& a, const at::Tensor& b) { return at::equal(a, b); }

}  // namespace

TEST(Experts, TheTinyMoeLoadsTwoDistinctExperts) {
  LoadedModel m = tiny_moe();
  WanPipeline& pipe = *m.pipeline;
  ASSERT_TRUE(pipe.transformer_2());
  ASSERT_TRUE(pipe.spec().boundary_ratio.has_value());
  EXPECT_EQ(*pipe.spec().boundary_ratio, 0.875);
  EXPECT_FALSE(pipe.spec().expand_timesteps);
  EXPECT_EQ(pipe.pixel_multiple(), 16);
  EXPECT_EQ(pipe.vae()->config().scale_factor_spatial, 8);
  EXPECT_FALSE(pipe.vae()->config().is_residual);
  // Seeded by name: the second expert's weights are its own.
  EXPECT_FALSE(same(pipe.transformer()->named_parameters()["blocks.0.attn1.to_q.weight"],
                    pipe.transformer_2()->named_parameters()["blocks.0.attn1.to_q.weight"]));
  EXPECT_EQ(pipe.expert_for(875.0), 0);
  EXPECT_EQ(pipe.expert_for(874.9), 1);
  const int64_t k = switch_step(pipe);
  EXPECT_GT(k, 0);
  EXPECT_LT(k, kSteps);
}

TEST(Experts, EachStepRunsItsExpertWithItsGuidance) {
  LoadedModel m = tiny_moe();
  WanPipeline& pipe = *m.pipeline;
  const int64_t k = switch_step(pipe);
  std::vector<at::Tensor> two, one, other_g2;
  pipe.denoise(inputs(4.0, 4.0), &two);
  pipe.denoise(inputs(4.0, 3.0), &other_g2);
  // The same pipeline with the first expert alone: equal up to the switch, not after it.
  WanPipeline single(pipe.transformer(), pipe.vae(), nullptr, nullptr,
                     configs_of(models::model_facts("wan22-tiny-moe")).scheduler, pipe.precision());
  single.set_spec(PipelineSpec{false, std::nullopt});
  single.denoise(inputs(4.0, 4.0), &one);
  ASSERT_EQ(two.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(one.size(), static_cast<size_t>(kSteps));
  for (int64_t i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i) + ", switch at " + std::to_string(k));
    EXPECT_EQ(same(two[i], one[i]), i < k);       // the second expert from the switch on
    EXPECT_EQ(same(two[i], other_g2[i]), i < k);  // and its own guidance scale
  }
}

TEST(Experts, ACachePolicyStartsAfreshWithTheSecondExpert) {
  LoadedModel m = tiny_moe();
  WanPipeline& pipe = *m.pipeline;
  const int64_t k = switch_step(pipe);
  const int64_t layers = pipe.transformer()->config().num_layers;
  struct Case {
    const char* name;
    std::function<void(RuntimeOptions&)> set;
  };
  const std::vector<Case> cases = {{"forced_skip (every step but the first)",
                                    [](RuntimeOptions& o) {
                                      for (int64_t i = 1; i < kSteps; ++i) o.of<ForcedSkipOptions>().steps.push_back(i);
                                    }},
                                   {"easycache (threshold 1)",
                                    [](RuntimeOptions& o) {
                                      auto& e = o.of<EasyCacheOptions>();
                                      e.enabled = true;
                                      e.threshold = 1.0;
                                      e.warmup_steps = 1;
                                      e.dense_last_step = false;
                                    }},
                                   {"first_block_cache (threshold 5)", [](RuntimeOptions& o) {
                                      auto& f = o.of<FirstBlockCacheOptions>();
                                      f.enabled = true;
                                      f.threshold = 5.0;
                                      f.warmup_steps = 1;
                                      f.dense_last_step = false;
                                    }}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    RuntimeOptions o;
    c.set(o);
    pipe.set_options(o);
    Trace trace;
    StageTimes times;
    pipe.denoise(inputs(4.0, 3.0), nullptr, {}, &trace, &times);
    ASSERT_EQ(times.step_forwards.size(), static_cast<size_t>(kSteps));
    // The policy skipped work (so it would have reused at the switch), but the second expert's first step
    // ran both branches through every block: nothing the first expert left behind was reused.
    EXPECT_GT(trace.get("cache.skipped_forwards"), 0);
    EXPECT_EQ(times.step_forwards[k], 2);
    EXPECT_EQ(times.step_blocks[k], 2 * layers);
    int64_t work_after_first = 0;
    for (int64_t i = 1; i < kSteps; ++i) work_after_first += times.step_blocks[i];
    EXPECT_LT(work_after_first, 2 * layers * (kSteps - 1));  // it did skip elsewhere
  }
  pipe.set_options({});
}

TEST(Experts, ChannelConditionedFeed) {
  // A14B image-to-video: the condition's channels follow the latents', one timestep per sample, the
  // latents returned as the scheduler left them.
  const at::Tensor latents = at::randn({1, 4, 3, 2, 2});
  const at::Tensor condition = at::randn({1, 8, 3, 2, 2});
  const DenoiseFeed feed(PipelineSpec{false, 0.9}, condition, latents, {1, 2, 2});
  EXPECT_TRUE(same(feed.model_input(latents), at::cat({latents, condition}, 1)));
  EXPECT_EQ(feed.timestep(900.0, 1).sizes(), (std::vector<int64_t>{1}));
  EXPECT_EQ(feed.timestep(900.0, 1).item<float>(), 900.0f);
  EXPECT_TRUE(same(feed.final_latents(latents), latents));
  EXPECT_THROW(DenoiseFeed(PipelineSpec{false, 0.9}, at::randn({1, 8, 2, 2, 2}), latents, {1, 2, 2}), Error);
  // TI2V (expand_timesteps): a timestep per token, 0 on the image's frame, the image re-imposed.
  const at::Tensor image = at::randn({1, 4, 1, 2, 2});
  const DenoiseFeed ti2v(PipelineSpec{}, image, latents, {1, 2, 2});
  const at::Tensor t = ti2v.timestep(500.0, 1);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t[0][0].item<float>(), 0.0f);
  EXPECT_EQ(t[0][2].item<float>(), 500.0f);
  EXPECT_TRUE(same(ti2v.final_latents(latents).narrow(2, 0, 1), image));
}

TEST(Experts, AnImageToVideoModelWithoutAnImageIsAnError) {
  LoadedModel m = tiny_moe();
  WanPipeline& pipe = *m.pipeline;
  // The same experts fed the image's channels: a pipeline that cannot run text-to-video says so.
  nlohmann::json j = configs_of(models::model_facts("wan22-tiny-moe")).transformer.to_json();
  j["in_channels"] = 36;
  WanTransformer3DModel a(WanTransformerConfig::from_json(j), pipe.precision());
  WanTransformer3DModel b(WanTransformerConfig::from_json(j), pipe.precision());
  WanPipeline i2v(a, pipe.vae(), nullptr, nullptr, configs_of(models::model_facts("wan22-tiny-moe")).scheduler,
                  pipe.precision());
  i2v.set_spec(PipelineSpec{false, 0.9}, b);
  GenerateParams p;
  p.height = 32;
  p.width = 48;
  p.frames = 5;
  p.steps = 2;
  try {
    i2v.generate(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("image-to-video model"), std::string::npos) << e.what();
  }
  // The condition of an image: a 4-channel mask, 1 on the first latent frame only, then the latents.
  const at::Tensor c = i2v.encode_condition(at::rand({1, 3, 32, 48}), 9);
  EXPECT_EQ(c.sizes(), (std::vector<int64_t>{1, 20, 3, 4, 6}));
  EXPECT_EQ(c.narrow(1, 0, 4).select(2, 0).min().item<float>(), 1.0f);
  EXPECT_EQ(c.narrow(1, 0, 4).narrow(2, 1, 2).abs().max().item<float>(), 0.0f);
  // Two experts of different architectures are refused.
  EXPECT_THROW(pipe.set_spec(PipelineSpec{false, 0.9}, a), Error);
}

TEST(Experts, GoldenVectorsOfTheReference) {
  // tests/data/golden_a14b: diffusers at 58eb52c (../shared/reference/make_golden_a14b.py): the Wan2.1 VAE
  // with every decoder module's output, and both two-expert pipelines step by step.
  VerifyOptions o;
  const VerifyReport rep = verify_golden_dir(test::data_dir() + "/golden_a14b", o);
  std::set<std::string> names;
  for (const auto& r : rep.rows) {
    EXPECT_TRUE(r.pass) << r.component << " " << r.tensor << " rel_l2 " << r.rel_l2 << " > " << r.tolerance;
    names.insert(r.component + ":" + r.tensor);
  }
  EXPECT_TRUE(rep.skipped.empty());
  const std::set<std::string> want = {"a14b_pipeline:t2v_final_latents",
                                      "a14b_pipeline:t2v_latents_per_step",
                                      "a14b_pipeline:t2v_video",
                                      "a14b_pipeline:i2v_final_latents",
                                      "a14b_pipeline:i2v_latents_per_step",
                                      "vae21_tiny:decoded",
                                      "vae21_tiny:inter.decoder.conv_in",
                                      "vae21_tiny:inter.decoder.conv_out",
                                      "vae21_tiny:inter.decoder.mid_block",
                                      "vae21_tiny:inter.decoder.norm_out",
                                      "vae21_tiny:inter.decoder.up_blocks.0",
                                      "vae21_tiny:inter.decoder.up_blocks.1",
                                      "vae21_tiny:inter.decoder.up_blocks.2",
                                      "vae21_tiny:inter.decoder.up_blocks.3",
                                      "vae21_tiny:inter.post_quant_conv",
                                      "vae21_tiny:encoded_mean",
                                      "vae21_tiny:encoded_logvar",
                                      "vae21_tiny:image_encoded_mean"};
  EXPECT_EQ(names, want);
}
