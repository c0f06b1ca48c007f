// The model table (src/models): every model's facts, the lookups by name, and the unknown-name error.
// The values are asserted literally: a fact that changes in the table, or a model that goes missing,
// fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "base/error.h"
#include "base/sha256.h"
#include "models/model_table.h"

namespace autooptim::models {
namespace {

const std::string kSrc = AUTOOPTIM_SOURCE_DIR;

TEST(ModelTable, ListsEveryModelOnceInCommandLineOrder) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"wan22-tiny", "wan22-ti2v-5b", "wan22-t2v-a14b", "wan22-i2v-a14b",
                                                     "wan22-tiny-moe"}));
  EXPECT_EQ(model_names_sorted(), (std::vector<std::string>{"wan22-i2v-a14b", "wan22-t2v-a14b", "wan22-ti2v-5b",
                                                            "wan22-tiny", "wan22-tiny-moe"}));
  const std::vector<std::string> names = model_names();
  const std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), model_table().size());
  EXPECT_EQ(std::string(kDefaultModel), "wan22-tiny");
  EXPECT_NE(find_model(kDefaultModel), nullptr);
}

TEST(ModelTable, LooksUpByName) {
  for (const auto& name : model_names()) {
    const ModelFacts* m = find_model(name);
    ASSERT_NE(m, nullptr) << name;
    EXPECT_EQ(m->name, name);
    EXPECT_EQ(&model_facts(name), m);
  }
  EXPECT_EQ(find_model("wan22-tiny "), nullptr);
  EXPECT_EQ(find_model("WAN22-TINY"), nullptr);
  EXPECT_EQ(find_model(""), nullptr);
}

TEST(ModelTable, UnknownNameIsAnErrorListingTheKnownOnes) {
  try {
    model_facts("sd15");
    FAIL() << "no error for an unknown model";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "unknown model 'sd15' (known: wan22-tiny, wan22-ti2v-5b, wan22-t2v-a14b, wan22-i2v-a14b, "
                 "wan22-tiny-moe)");
  }
}

TEST(ModelTable, TinyFacts) {
  const ModelFacts& m = model_facts("wan22-tiny");
  EXPECT_TRUE(m.embedded);
  EXPECT_EQ(&embedded_model(), &m);
  EXPECT_TRUE(m.trainable);
  EXPECT_FALSE(m.wants_gpu);
  EXPECT_EQ(m.tokenizer, TokenizerSource::kEmbedded);
  EXPECT_EQ(m.shipped_weights_dir, "assets/wan22-tiny/weights");
  const OfficialRun& o = m.official;
  EXPECT_EQ(o.height, 96);
  EXPECT_EQ(o.width, 160);
  EXPECT_EQ(o.frames, 49);
  EXPECT_EQ(o.fps, 24);
  EXPECT_EQ(o.steps, 50);
  EXPECT_EQ(o.guidance, 5.0);
  EXPECT_EQ(o.seed, 42);
  EXPECT_EQ(o.flow_shift, 5.0);
  EXPECT_EQ(m.gate.min_baseline_efficiency_cpu, 0.05);
  EXPECT_EQ(m.gate.min_baseline_efficiency_cuda, 0.0);
  EXPECT_TRUE(m.gate.object_check);
  EXPECT_EQ(m.run.budget_minutes, 6.0);
  EXPECT_EQ(m.run.budget_trials, 10);
  EXPECT_EQ(m.run.executor_trials, 5);
  EXPECT_EQ(m.run.max_prompts, 2);
  EXPECT_EQ(m.run.timing_repeats, 2);
  ASSERT_TRUE(m.run.screen_min_speedup.has_value());
  EXPECT_EQ(*m.run.screen_min_speedup, 0.0);
}

TEST(ModelTable, TinyArchitectureIsCompiledIn) {
  const ModelFacts& m = model_facts("wan22-tiny");
  ASSERT_TRUE(m.architecture.has_value());
  const Architecture& a = *m.architecture;
  EXPECT_EQ(a.transformer.at("num_layers"), 4);
  EXPECT_EQ(a.transformer.at("num_attention_heads"), 4);
  EXPECT_EQ(a.transformer.at("attention_head_dim"), 24);
  EXPECT_EQ(a.transformer.at("in_channels"), a.vae.at("z_dim"));  // the latent the transformer sees
  EXPECT_EQ(a.transformer.at("text_dim"), a.text_encoder.at("d_model"));
  EXPECT_EQ(a.vae.at("latents_mean").size(), 16u);
  EXPECT_EQ(a.vae.at("latents_std").size(), 16u);
  EXPECT_EQ(a.text_encoder.at("vocab_size"), 512);
}

TEST(ModelTable, Ti2v5bFacts) {
  const ModelFacts& m = model_facts("wan22-ti2v-5b");
  EXPECT_FALSE(m.embedded);
  EXPECT_FALSE(m.architecture.has_value());  // the runtime's full-size presets
  EXPECT_FALSE(m.trainable);
  EXPECT_TRUE(m.wants_gpu);
  EXPECT_EQ(m.tokenizer, TokenizerSource::kCheckpoint);
  EXPECT_TRUE(m.shipped_weights_dir.empty());
  EXPECT_FALSE(m.own_prompts.has_value());
  const OfficialRun& o = m.official;
  EXPECT_EQ(o.height, 704);
  EXPECT_EQ(o.width, 1280);
  EXPECT_EQ(o.frames, 121);
  EXPECT_EQ(o.fps, 24);
  EXPECT_EQ(o.steps, 50);
  EXPECT_EQ(o.guidance, 5.0);
  EXPECT_EQ(o.seed, 42);
  EXPECT_EQ(o.flow_shift, 5.0);
  EXPECT_EQ(m.gate.min_baseline_efficiency_cpu, 0.05);
  EXPECT_EQ(m.gate.min_baseline_efficiency_cuda, 0.25);
  EXPECT_FALSE(m.gate.object_check);
  EXPECT_EQ(m.run.budget_minutes, 60.0);
  EXPECT_EQ(m.run.budget_trials, 40);
  EXPECT_EQ(m.run.executor_trials, 8);
  EXPECT_EQ(m.run.max_prompts, 0);
  EXPECT_EQ(m.run.timing_repeats, 3);
  EXPECT_FALSE(m.run.screen_min_speedup.has_value());
}

TEST(ModelTable, A14bFacts) {
  // The two-expert checkpoints: the official shape (1280x720, 81 frames), the reference pipeline's
  // default steps and guidance, their model_index.json's boundary ratios, the Wan2.1 VAE.
  for (const char* name : {"wan22-t2v-a14b", "wan22-i2v-a14b"}) {
    SCOPED_TRACE(name);
    const ModelFacts& m = model_facts(name);
    const bool i2v = std::string(name) == "wan22-i2v-a14b";
    EXPECT_FALSE(m.embedded);
    EXPECT_TRUE(m.wants_gpu);
    EXPECT_EQ(m.tokenizer, TokenizerSource::kCheckpoint);
    EXPECT_FALSE(m.pipeline.expand_timesteps);
    ASSERT_TRUE(m.pipeline.boundary_ratio.has_value());
    EXPECT_EQ(*m.pipeline.boundary_ratio, i2v ? 0.9 : 0.875);
    EXPECT_EQ(m.pipeline.needs_image, i2v);
    EXPECT_EQ(m.pixel_multiple, 16);
    EXPECT_EQ(m.official.height, 720);
    EXPECT_EQ(m.official.width, 1280);
    EXPECT_EQ(m.official.frames, 81);
    EXPECT_EQ(m.official.fps, 16);
    EXPECT_EQ(m.official.steps, 50);
    EXPECT_EQ(m.official.guidance, 5.0);
    EXPECT_EQ(m.official.guidance_2, 5.0);
    ASSERT_TRUE(m.architecture.has_value());
    const Architecture& a = *m.architecture;
    EXPECT_EQ(a.transformer.at("num_layers"), 40);
    EXPECT_EQ(a.transformer.at("num_attention_heads"), 40);
    EXPECT_EQ(a.transformer.at("attention_head_dim"), 128);
    EXPECT_EQ(a.transformer.at("ffn_dim"), 13824);
    EXPECT_EQ(a.transformer.at("in_channels"), i2v ? 36 : 16);  // noise (+ 4 mask + 16 image channels)
    EXPECT_EQ(a.vae.at("z_dim"), 16);
    EXPECT_EQ(a.vae.at("is_residual"), false);
    EXPECT_EQ(a.vae.at("scale_factor_spatial"), 8);
    EXPECT_EQ(a.text_encoder.at("d_model"), a.transformer.at("text_dim"));
  }
  const ModelFacts& tiny = model_facts("wan22-tiny-moe");
  EXPECT_FALSE(tiny.wants_gpu);
  EXPECT_TRUE(tiny.smooth_synthetic);
  EXPECT_EQ(tiny.tokenizer, TokenizerSource::kEmbedded);
  EXPECT_EQ(tiny.pipeline.boundary_ratio, 0.875);
  EXPECT_EQ(tiny.official.guidance, 4.0);
  EXPECT_EQ(tiny.official.guidance_2, 3.0);
  EXPECT_EQ(tiny.architecture->vae.at("is_residual"), false);
}

TEST(ModelTable, EveryModelHasItsFacts) {
  for (const auto& m : model_table()) {
    SCOPED_TRACE(m.name);
    EXPECT_FALSE(m.name.empty());
    // A valid official setting: the VAE's spatial factor times the patch, and 4x temporal compression.
    EXPECT_GT(m.official.height, 0);
    EXPECT_TRUE(m.pixel_multiple == 16 || m.pixel_multiple == 32);
    EXPECT_EQ(m.official.height % m.pixel_multiple, 0);
    EXPECT_EQ(m.official.width % m.pixel_multiple, 0);
    // Two experts and a second guidance scale go together; so do an image-to-video model and channels.
    EXPECT_EQ(m.pipeline.boundary_ratio.has_value(), m.official.guidance_2.has_value());
    if (m.pipeline.needs_image) EXPECT_FALSE(m.pipeline.expand_timesteps);
    EXPECT_EQ(m.official.frames % 4, 1);
    EXPECT_GT(m.official.steps, 0);
    EXPECT_GT(m.official.fps, 0);
    EXPECT_GT(m.run.budget_minutes, 0);
    EXPECT_GE(m.run.budget_trials, 1);
    EXPECT_GE(m.run.executor_trials, 1);
    EXPECT_GE(m.run.timing_repeats, 1);
    // The embedded model needs no checkpoint: its architecture and tokenizer are compiled in.
    if (m.embedded) {
      EXPECT_TRUE(m.architecture.has_value());
      EXPECT_EQ(m.tokenizer, TokenizerSource::kEmbedded);
    }
    // Shipped weights and a prompt set of its own are found in the source tree.
    if (!m.shipped_weights_dir.empty()) EXPECT_TRUE(std::filesystem::exists(kSrc + "/" + m.shipped_weights_dir));
    if (m.own_prompts) EXPECT_TRUE(std::filesystem::is_directory(kSrc + "/" + m.own_prompts->dir));
  }
  EXPECT_EQ(std::count_if(model_table().begin(), model_table().end(), [](const ModelFacts& m) { return m.embedded; }),
            1);
}

TEST(ModelTable, PromptPinMatchesTheShippedHeldOutFile) {
  const ModelFacts& m = model_facts("wan22-tiny");
  ASSERT_TRUE(m.own_prompts.has_value());
  EXPECT_EQ(m.own_prompts->dir, "prompts/wan22-tiny");
  EXPECT_EQ(m.own_prompts->heldout_sha256, "8bb478670a47e91c633a8f4a154601436510288d757d73df2bd32abf54bba506");
  EXPECT_EQ(gates::sha256_file_hex(kSrc + "/" + m.own_prompts->dir + "/heldout.jsonl"), m.own_prompts->heldout_sha256);
  EXPECT_EQ(model_with_prompt_folder("wan22-tiny"), &m);
  EXPECT_EQ(model_with_prompt_folder("prompts"), nullptr);
  EXPECT_EQ(model_with_prompt_folder("wan22-ti2v-5b"), nullptr);
}

TEST(ModelTable, TrainableModels) { EXPECT_EQ(trainable_models(), (std::vector<std::string>{"wan22-tiny"})); }

}  // namespace
}  // namespace autooptim::models
