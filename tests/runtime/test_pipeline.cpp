// The whole pipeline: golden text- and image-to-video within 1e-4, the real checkpoint folder layout
// loaded from synthetic weights, the embedded tiny model, and bad sizes.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/blas_threads.h"
#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/models.h"
#include "runtime/techniques/engagement.h"
#include "runtime/verify.h"
#include "cpu_bf16.h"
#include "error_of.h"
#include "test_util.h"
#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/techniques/cache/taylorseer_options.h"
#include "runtime/techniques/kernel/attention_backend_options.h"
#include "runtime/techniques/kernel/cross_kv_cache_options.h"
#include "runtime/techniques/kernel/cuda_graph_options.h"
#include "runtime/techniques/kernel/fused_cross_norm_options.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"
#include "runtime/techniques/kernel/gemm_autotune_options.h"
#include "runtime/techniques/kernel/hopper_attention_options.h"
#include "runtime/techniques/kernel/rope_cache_options.h"
#include "runtime/techniques/kernel/text_trim_options.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/kernel/uniform_timestep_options.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"
#include "runtime/techniques/vae/vae_bf16_options.h"
#include "runtime/techniques/vae/vae_channels_last_options.h"

using namespace autooptim;
using namespace autooptim::runtime;
namespace fs = std::filesystem;

TEST(Pipeline, GoldenTextAndImageToVideo) {
  const std::string g = test::golden_dir();
  GoldenPair p{"pipeline_tiny", g + "/pipeline_tiny_weights.json", g + "/pipeline_tiny_weights.safetensors",
               g + "/pipeline_tiny_io.json", g + "/pipeline_tiny_io.safetensors"};
  VerifyOptions o;
  o.tolerance = 1e-4;
  VerifyReport rep;
  verify_pipeline(p, o, rep);
  std::set<std::string> names;
  for (const auto& r : rep.rows) {
    EXPECT_TRUE(r.pass) << r.tensor << " rel_l2 " << r.rel_l2;
    names.insert(r.tensor);
  }
  EXPECT_EQ(names, (std::set<std::string>{"t2v_final_latents", "t2v_latents_per_step", "t2v_video", "i2v_final_latents",
                                          "i2v_latents_per_step"}));
}

TEST(Pipeline, BadSizesAreClearErrors) {
  GenerateParams p;
  p.height = 700;
  EXPECT_THROW(validate_params(p), Error);
  p = {};
  p.width = 1290;
  EXPECT_THROW(validate_params(p), Error);
  p = {};
  p.frames = 120;
  try {
    validate_params(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4k+1"), std::string::npos);
  }
  p = {};
  EXPECT_NO_THROW(validate_params(p));  // the official 1280x704, 121 frames
}

namespace {

// Writes a diffusers-layout checkpoint folder of the given configs from a loaded model's weights:
// transformer sharded in two with an index, the text encoder sharded too, the VAE one file.
void write_checkpoint_folder(const fs::path& dir, const ModelConfigs& c, WanPipeline& pipe, UMT5EncoderModel& te) {
  fs::create_directories(dir);
  for (const char* sub : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"})
    fs::create_directories(dir / sub);
  auto dump = [](const fs::path& f, const nlohmann::json& j) { std::ofstream(f) << j.dump(2); };
  dump(dir / "model_index.json", {{"_class_name", "WanPipeline"},
                                  {"_diffusers_version", "0.35.0"},
                                  {"expand_timesteps", true},
                                  {"transformer", {"diffusers", "WanTransformer3DModel"}},
                                  {"vae", {"diffusers", "AutoencoderKLWan"}},
                                  {"text_encoder", {"transformers", "UMT5EncoderModel"}},
                                  {"tokenizer", {"transformers", "T5TokenizerFast"}},
                                  {"scheduler", {"diffusers", "UniPCMultistepScheduler"}},
                                  {"transformer_2", {nullptr, nullptr}}});
  dump(dir / "transformer/config.json", c.transformer.to_json());
  dump(dir / "vae/config.json", c.vae.to_json());
  dump(dir / "text_encoder/config.json", c.text_encoder.to_json());
  dump(dir / "scheduler/scheduler_config.json", c.scheduler.to_json());
  std::ofstream(dir / "tokenizer/spiece.model", std::ios::binary) << tiny_tokenizer_model();

  auto sharded = [&](torch::nn::Module& m, const fs::path& sub, const std::string& stem) {
    std::vector<std::pair<std::string, at::Tensor>> a, b;
    nlohmann::json map = nlohmann::json::object();
    size_t i = 0;
    for (const auto& kv : m.named_parameters()) {
      const bool first = (i++ % 2) == 0;
      (first ? a : b).emplace_back(kv.key(), kv.value());
      map[kv.key()] = stem + (first ? "-00001-of-00002.safetensors" : "-00002-of-00002.safetensors");
    }
    write_safetensors((sub / (stem + "-00001-of-00002.safetensors")).string(), a);
    write_safetensors((sub / (stem + "-00002-of-00002.safetensors")).string(), b);
    dump(sub / (stem + ".safetensors.index.json"), {{"metadata", {{"total_size", 0}}}, {"weight_map", map}});
  };
  sharded(*pipe.transformer(), dir / "transformer", "diffusion_pytorch_model");
  sharded(*te, dir / "text_encoder", "model");
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (const auto& kv : pipe.vae()->named_parameters()) v.emplace_back(kv.key(), kv.value());
  write_safetensors((dir / "vae/diffusion_pytorch_model.safetensors").string(), v);
}

GenerateParams small_params() {
  GenerateParams p;
  p.prompt = "a red fox running through snow";
  p.height = 64;
  p.width = 96;
  p.frames = 9;
  p.steps = 3;
  return p;
}

}  // namespace

TEST(Pipeline, CheckpointFolderLoadsAndGeneratesTheSameClip) {
  LoadRequest tiny;
  auto loaded = load_model(tiny);
  // A separate text encoder with the same synthetic weights, to write its tensors out.
  const auto c = tiny_configs();
  UMT5EncoderModel te(c.text_encoder);
  fill_synthetic(*te, 1, "text_encoder.");
  test::TempDir tmp;
  const fs::path dir = tmp.path() / "Wan2.2-TI2V-5B-Diffusers";
  write_checkpoint_folder(dir, c, *loaded.pipeline, te);

  LoadRequest real;
  real.model = "wan22-ti2v-5b";
  real.weights_dir = dir.string();
  auto from_folder = load_model(real);
  const auto a = loaded.pipeline->generate(small_params());
  const auto b = from_folder.pipeline->generate(small_params());
  EXPECT_EQ(a.video.sizes(), (std::vector<int64_t>{9, 3, 64, 96}));
  EXPECT_TRUE(at::equal(a.video, b.video));
  EXPECT_TRUE(at::equal(a.latents, b.latents));

  // A truncated shard is named in the error.
  const fs::path shard = dir / "transformer/diffusion_pytorch_model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 16);
  try {
    load_model(real);
    FAIL() << "truncated shard accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("diffusion_pytorch_model-00002-of-00002.safetensors"), std::string::npos)
        << e.what();
  }
  // Missing parts are listed together.
  fs::remove(dir / "vae/config.json");
  fs::remove(dir / "tokenizer/spiece.model");
  try {
    load_model(real);
    FAIL() << "incomplete folder accepted";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("vae/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer/spiece.model"), std::string::npos) << msg;
  }
}

TEST(Pipeline, ACheckpointOfAnotherKindNamesTheModelItLooksLike) {
  LoadRequest tiny;
  auto loaded = load_model(tiny);
  const auto c = tiny_configs();
  UMT5EncoderModel te(c.text_encoder);
  fill_synthetic(*te, 1, "text_encoder.");
  test::TempDir tmp;
  const fs::path dir = tmp.path() / "one-transformer";
  write_checkpoint_folder(dir, c, *loaded.pipeline, te);
  // One transformer, asked for as the two-expert model: the table's one-transformer model is named.
  LoadRequest wrong;
  wrong.model = "wan22-t2v-a14b";
  wrong.weights_dir = dir.string();
  EXPECT_EQ(test::error_of<CheckpointError>([&] { load_model(wrong); }),
            dir.string() + ": a one-transformer checkpoint, not wan22-t2v-a14b's (--model wan22-ti2v-5b?)");
  // model_index.json naming a second expert without its boundary (or the reverse) is refused.
  nlohmann::json index = nlohmann::json::parse(std::ifstream(dir / "model_index.json"));
  index["transformer_2"] = {"diffusers", "WanTransformer3DModel"};
  std::ofstream(dir / "model_index.json") << index.dump();
  EXPECT_NE(test::error_of<CheckpointError>([&] {
              read_checkpoint_configs(dir.string());
            }).find("transformer_2 and boundary_ratio go together (one is set, the other not)"),
            std::string::npos);
  index["boundary_ratio"] = 0.875;
  std::ofstream(dir / "model_index.json") << index.dump();
  EXPECT_NE(test::error_of<CheckpointError>([&] {
              read_checkpoint_configs(dir.string());
            }).find("model_index.json names transformer_2 but transformer_2/config.json is missing"),
            std::string::npos);
}

TEST(Pipeline, TinyModelIsDeterministicAndSeedsMatter) {
  auto m = load_model(LoadRequest{});
  auto p = small_params();
  const auto a = m.pipeline->generate(p);
  const auto b = m.pipeline->generate(p);
  EXPECT_TRUE(at::equal(a.video, b.video));
  EXPECT_EQ(a.trace.get("transformer.forwards"), 6.0);  // 3 steps x (cond + uncond)
  EXPECT_EQ(a.times.step_seconds.size(), 3u);
  p.seed = 43;
  const auto c = m.pipeline->generate(p);
  EXPECT_FALSE(at::equal(a.video, c.video));
  EXPECT_GE(a.video.min().item<float>(), 0.0f);
  EXPECT_LE(a.video.max().item<float>(), 1.0f);
  // Without guidance there is a single forward per step.
  p.guidance = 1.0;
  EXPECT_EQ(m.pipeline->generate(p).trace.get("transformer.forwards"), 3.0);
}

TEST(Pipeline, ImageToVideoKeepsTheFirstFrameLatent) {
  auto m = load_model(LoadRequest{});
  auto p = small_params();
  p.image = at::rand({3, 64, 96});
  const auto r = m.pipeline->generate(p);
  const at::Tensor z0 = m.pipeline->encode_image(p.image->unsqueeze(0));
  EXPECT_TRUE(at::equal(r.latents.slice(2, 0, 1), z0.to(at::kCPU)));
  // An image of another size is resized to the requested size.
  p.image = at::rand({3, 50, 70});
  EXPECT_EQ(m.pipeline->generate(p).video.sizes(), (std::vector<int64_t>{9, 3, 64, 96}));
}

TEST(Pipeline, EveryTechniqueIsOffByDefaultEngagesWhenOnAndOffReproducesTheBaseline) {
  auto m = load_model(LoadRequest{});
  const GenerateParams p = small_params();
  const RuntimeOptions defaults;
  EXPECT_FALSE(defaults.of<FusedQkvOptions>().on || defaults.of<CrossKvCacheOptions>().on ||
               defaults.of<TimestepDedupOptions>().on || defaults.of<RopeCacheOptions>().on ||
               defaults.of<TextTrimOptions>().on || defaults.of<CudaGraphOptions>().on ||
               defaults.of<EasyCacheOptions>().enabled || defaults.of<TaylorSeerOptions>().enabled ||
               defaults.of<SparseAttentionOptions>().pattern != "none" ||
               defaults.of<AttentionBackendOptions>().backend != "auto");
  const auto base = m.pipeline->generate(p);
  struct Case {
    const char* name;
    std::function<void(RuntimeOptions&)> on;
    const char* counter;
  };
  const std::vector<Case> cases = {
      {"fused_qkv", [](RuntimeOptions& o) { o.of<FusedQkvOptions>().on = true; }, "kernel.fused_qkv.launches"},
      {"cross_kv_cache", [](RuntimeOptions& o) { o.of<CrossKvCacheOptions>().on = true; },
       "kernel.cross_kv_cache.hits"},
      {"timestep_dedup", [](RuntimeOptions& o) { o.of<TimestepDedupOptions>().on = true; },
       "kernel.timestep_dedup.rows_saved"},
      {"uniform_timestep", [](RuntimeOptions& o) { o.of<UniformTimestepOptions>().on = true; },
       "kernel.uniform_timestep.samples"},
      {"rope_cache", [](RuntimeOptions& o) { o.of<RopeCacheOptions>().on = true; }, "kernel.rope_cache.hits"},
      {"text_trim", [](RuntimeOptions& o) { o.of<TextTrimOptions>().on = true; }, "kernel.text_trim.tokens_saved"},
      {"attention_backend", [](RuntimeOptions& o) { o.of<AttentionBackendOptions>().backend = "math"; },
       "kernel.attention.math.calls"},
      {"easycache",
       [](RuntimeOptions& o) {
         o.of<EasyCacheOptions>().enabled = true;
         o.of<EasyCacheOptions>().threshold = 1.0;
         o.of<EasyCacheOptions>().warmup_steps = 1;
         o.of<EasyCacheOptions>().dense_last_step = false;
       },
       "cache.easycache.skipped_forwards"},
      {"taylorseer",
       [](RuntimeOptions& o) {
         o.of<TaylorSeerOptions>().enabled = true;
         o.of<TaylorSeerOptions>().warmup_steps = 1;
         o.of<TaylorSeerOptions>().interval = 2;
         o.of<TaylorSeerOptions>().dense_last_step = false;  // of 3 steps: 0 warm-up, 1 scheduled, 2 forecast
       },
       "cache.taylorseer.skipped_forwards"},
      {"sparse",
       [](RuntimeOptions& o) {
         o.of<SparseAttentionOptions>().pattern = "spatial_temporal";
         o.of<SparseAttentionOptions>().dense_steps = 0;
         o.of<SparseAttentionOptions>().dense_layers = 0;
       },
       "sparse.attention.calls"},
  };
  for (const auto& c : cases) {
    RuntimeOptions o;
    c.on(o);
    m.pipeline->set_options(o);
    const auto on = m.pipeline->generate(p);
    EXPECT_GT(on.trace.get(c.counter), 0) << c.name;
    if (std::string(c.name) == "rope_cache")  // the same tables, kept: the same clip, bit for bit
      EXPECT_TRUE(at::equal(on.video, base.video)) << "rope_cache changes the clip";
    m.pipeline->set_options({});
    const auto off = m.pipeline->generate(p);
    EXPECT_TRUE(at::equal(off.video, base.video)) << c.name << ": off does not reproduce the baseline";
  }
  // cuda_graph where there is no CUDA (a CPU build, or the model on the CPU): the forward stays eager and
  // bit-identical, nothing is replayed, and the harness's engagement check names the switch.
  RuntimeOptions g;
  g.of<CudaGraphOptions>().on = true;
  m.pipeline->set_options(g);
  const auto eager = m.pipeline->generate(p);
  m.pipeline->set_options({});
  EXPECT_TRUE(at::equal(eager.video, base.video));
  EXPECT_EQ(eager.trace.get("kernel.cuda_graph.replays"), 0);
  const auto problems = engagement_problems(g, eager.trace);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("cuda_graph"), std::string::npos);
  // CUDA-only switches (a fused kernel, the cuBLASLt GEMM tuning) on the CPU: the reference ops run, the
  // clip is the baseline's, and the engagement check names the switch.
  const std::vector<std::pair<std::string, std::function<void(RuntimeOptions&)>>> gpu_only = {
      {"fused_cross_norm", [](RuntimeOptions& o) { o.of<FusedCrossNormOptions>().on = true; }},
      {"gemm_autotune", [](RuntimeOptions& o) { o.of<GemmAutotuneOptions>().on = true; }},
      {"hopper_attention", [](RuntimeOptions& o) { o.of<HopperAttentionOptions>().variant = 2; }}};
  for (const auto& [name, on] : gpu_only) {
    RuntimeOptions f;
    on(f);
    m.pipeline->set_options(f);
    const auto unfused = m.pipeline->generate(p);
    m.pipeline->set_options({});
    EXPECT_TRUE(at::equal(unfused.video, base.video)) << name;
    const auto fproblems = engagement_problems(f, unfused.trace);
    ASSERT_EQ(fproblems.size(), 1u) << name;
    EXPECT_NE(fproblems[0].find(name), std::string::npos) << fproblems[0];
  }
}

// text_trim is lossless in the harness's sense: the clip is the baseline's up to float rounding, and the
// trace counts the token rows of the prompt and the negative prompt that were not encoded.
TEST(Pipeline, TextTrimKeepsTheClip) {
  auto m = load_model(LoadRequest{});
  const GenerateParams p = small_params();
  const auto base = m.pipeline->generate(p);
  RuntimeOptions o;
  o.of<TextTrimOptions>().on = true;
  m.pipeline->set_options(o);
  const auto trimmed = m.pipeline->generate(p);
  m.pipeline->set_options({});
  EXPECT_LT((trimmed.video - base.video).abs().max().item<double>(), 1e-3);
  const double saved = trimmed.trace.get("kernel.text_trim.tokens_saved");
  EXPECT_GT(saved, 512 - 40);  // the prompt alone is far shorter than 512 tokens
  EXPECT_LT(saved, 2 * 512);
  EXPECT_EQ(base.trace.get("kernel.text_trim.tokens_saved"), 0);
}

// Each VAE conversion alone (channels_last without bf16 keeps the float32 biases as they were loaded): the
// decode matches the model's own; bench --vae-only with channels_last alone once failed here with libtorch's
// "Inference tensors do not track version counter".
TEST(Pipeline, VaeConversionsAloneDecodeAsTheModelsOwn) {
  auto m = load_model(LoadRequest{});
  const auto r = m.pipeline->generate(small_params());
  const at::Tensor ref = m.pipeline->decode(r.latents);
  for (const bool bf16 : {false, true}) {
    RuntimeOptions o;
    o.of<VaeChannelsLastOptions>().on = true;
    o.of<VaeBf16Options>().on = bf16;
    m.pipeline->set_options(o);
    at::Tensor got;
    {
      at::InferenceMode guard;  // as the gate and bench decode
      got = m.pipeline->decode(r.latents);
    }
    ASSERT_EQ(got.sizes(), ref.sizes());
    const double rel = ((got.to(at::kFloat) - ref).norm() / ref.norm()).item<double>();
    // bf16: within 2% where the CPU's bf16 convolutions accumulate in float32; 3.7% was seen where they
    // accumulate in bf16 (cpu_bf16.h).
    EXPECT_LE(rel, bf16 ? (test::cpu_bf16_conv_accumulates_in_bf16() ? 6e-2 : 2e-2) : 1e-5) << "bf16=" << bf16;
    m.pipeline->set_options(RuntimeOptions{});
  }
}

// OpenBLAS (Debian's libtorch's BLAS) runs one thread per op once a pipeline exists: its own spinning
// threads next to libtorch's cost seconds of system time per clip on 2 cores and made timings vary by up
// to 70% (runtime/blas_threads.h).
TEST(Pipeline, OpenBlasRunsSingleThreadedUnderLibtorch) {
  using GetThreads = int (*)();
  const auto get = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!get) GTEST_SKIP() << "no OpenBLAS in this process";
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS"); env && *env)
    GTEST_SKIP() << "OPENBLAS_NUM_THREADS is set: kept";
  auto m = load_model(LoadRequest{});
  EXPECT_EQ(get(), 1);
  EXPECT_NE(settle_blas_threads().find("1 thread"), std::string::npos) << settle_blas_threads();
}
