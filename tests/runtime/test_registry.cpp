// The technique registry: what every technique declares, how manifests read it (unregistered flags
// refused by key, canonical form unchanged for the techniques that predate it), the engagement check,
// the calibrations' fits, and `autooptim techniques --json`.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <set>
#include <sys/wait.h>
#include <utility>

#include "gates/manifest.h"
#include "base/error.h"
#include "runtime/techniques/engagement.h"
#include "runtime/techniques/registry.h"
#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/techniques/cache/taylorseer_options.h"
#include "runtime/techniques/cache/teacache_options.h"
#include "runtime/techniques/kernel/attention_backend_options.h"
#include "runtime/techniques/kernel/cross_kv_cache_options.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"
#include "runtime/techniques/kernel/gelu_epilogue_options.h"
#include "runtime/techniques/kernel/hopper_attention_options.h"
#include "runtime/techniques/kernel/text_trim_options.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/kernel/uniform_timestep_options.h"
#include "runtime/techniques/quant/fp8_linear_options.h"
#include "runtime/techniques/vae/vae_bf16_options.h"
#include "runtime/techniques/vae/vae_causal_buffer_options.h"
#include "runtime/techniques/vae/vae_chunk_frames_options.h"
#include "runtime/techniques/vae/vae_fused_shortcut_options.h"

namespace autooptim::runtime::techniques {
namespace {

using nlohmann::json;

json patch_with(const json& flags) {
  // composite: these tests are about the flags, any family's (the family rule has its own test).
  return {{"id", "wan22-tiny/composite/x"},
          {"kind", "patch"},
          {"family", "composite"},
          {"model", "wan22-tiny"},
          {"runtime", "autooptim/1"},
          {"base", "wan22-tiny/baseline"},
          {"flags", flags},
          {"lossless", false},
          {"config", gates::to_json(gates::official_config("wan22-tiny"))}};
}

std::string parse_error(const json& flags) {
  try {
    gates::parse_manifest(patch_with(flags), "m.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::set<std::string> keys_of(const json& j) {
  std::set<std::string> out;
  for (const auto& item : j.items()) out.insert(item.key());
  return out;
}

TEST(Registry, ListsEveryTechniqueWithItsFamilyAndLosslessness) {
  std::map<std::string, std::pair<std::string, bool>> got;
  for (const auto& t : all()) got[t.name] = {t.family, t.lossless};
  const std::map<std::string, std::pair<std::string, bool>> want = {
      {"attention_backend", {"kernel", true}},
      {"cross_kv_cache", {"kernel", true}},
      {"cuda_graph", {"kernel", true}},
      {"fused_qkv", {"kernel", true}},
      {"text_trim", {"kernel", true}},
      {"timestep_dedup", {"kernel", true}},
      {"rope_cache", {"kernel", true}},
      {"uniform_timestep", {"kernel", true}},
      {"easycache", {"cache", false}},
      {"teacache", {"cache", false}},
      {"magcache", {"cache", false}},
      {"first_block_cache", {"cache", false}},
      {"forced_skip", {"cache", false}},
      {"taylorseer", {"cache", false}},
      {"sparse", {"sparse", false}},
      // The fused block kernels round differently from libtorch's separate kernels: lossy (measured).
      {"fused_norm_modulate", {"kernel", false}},
      {"fused_gate_residual", {"kernel", false}},
      {"fused_qk_norm_rope", {"kernel", false}},
      {"gelu_epilogue", {"kernel", false}},
      {"fused_cross_norm", {"kernel", false}},
      {"gemm_autotune", {"kernel", false}},
      {"hopper_attention", {"kernel", true}},  // another attention kernel, as attention_backend's choices are
      {"fp8", {"quant", false}},
      // The VAE decoder's switches: the causal buffer, its ring, the fused shortcut and the graphs compute exactly
      // what the reference computes.
      {"vae_bf16", {"kernel", false}},
      {"vae_channels_last", {"kernel", true}},
      {"vae_fused_norm_silu", {"kernel", false}},
      {"vae_subpixel_upsample", {"kernel", false}},
      {"vae_causal_buffer", {"kernel", true}},
      {"vae_fused_shortcut", {"kernel", true}},
      {"vae_cudnn_benchmark", {"kernel", false}},
      {"vae_chunk_frames", {"kernel", false}},
      {"vae_frame_convs", {"kernel", false}},
      {"vae_transposed_upsample", {"kernel", false}},
      {"vae_head_pad", {"kernel", false}},
      {"vae_pointwise_gemm", {"kernel", false}},
      {"vae_causal_ring", {"kernel", true}},
      {"vae_cuda_graph", {"kernel", true}}};
  EXPECT_EQ(got, want);
  for (const auto& t : all()) {
    SCOPED_TRACE(t.name);
    EXPECT_FALSE(t.on(RuntimeOptions{})) << "every technique is off by default";
    EXPECT_FALSE(t.engagement.empty());
    EXPECT_FALSE(t.hooks.empty());
    EXPECT_EQ(find(t.name), &t);
  }
  EXPECT_EQ(find("radial_attention"), nullptr);
}

TEST(Registry, EveryProposedCachePolicyDeclaresItsWarmUpAndLastStep) {
  // The gate's work floor and the red team's skip_warmup both read these declarations: a policy that
  // forgot one would be neither checked nor attacked. Each accessor reaches its own policy's fields.
  std::set<std::string> declared;
  for (const auto& t : all()) {
    if (t.family != "cache" || !t.search) continue;
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(t.warmup_steps) << "no warm-up declared";
    ASSERT_TRUE(t.dense_last_step) << "no last-step declaration";
    RuntimeOptions o;
    const int64_t before = t.warmup_steps(o);
    t.warmup_steps(o) = before + 7;
    int changed = 0;  // exactly one policy's warm-up field moved
    for (const auto& u : all())
      if (u.warmup_steps) {
        RuntimeOptions fresh;
        changed += u.warmup_steps(o) != u.warmup_steps(fresh);
      }
    EXPECT_EQ(changed, 1);
    EXPECT_TRUE(t.dense_last_step(RuntimeOptions{}));  // every policy computes the last step by default
    declared.insert(t.name);
  }
  EXPECT_EQ(declared, (std::set<std::string>{"easycache", "teacache", "magcache", "first_block_cache", "taylorseer"}));
}

TEST(Registry, WhichTechniquesWorkOnTheDecode) {
  // The gate lets the decode be faster than the baseline's only when one of these is on.
  RuntimeOptions o;
  EXPECT_FALSE(works_on_decode(o));
  o.of<CrossKvCacheOptions>().on = true;
  o.of<EasyCacheOptions>().enabled = true;
  EXPECT_FALSE(works_on_decode(o));
  for (auto set : std::vector<std::function<void(RuntimeOptions&)>>{
           [](RuntimeOptions& x) { x.of<VaeBf16Options>().on = true; },
           [](RuntimeOptions& x) { x.of<VaeCausalBufferOptions>().on = true; },
           [](RuntimeOptions& x) { x.of<VaeFusedShortcutOptions>().on = true; },
           [](RuntimeOptions& x) { x.of<VaeChunkFramesOptions>().frames = 4; }}) {
    RuntimeOptions v;
    set(v);
    EXPECT_TRUE(works_on_decode(v));
  }
  // Likewise the text encoding: only text_trim works on it, and it does not work on the decode.
  EXPECT_FALSE(works_on_text_encoding(o));
  RuntimeOptions t;
  t.of<TextTrimOptions>().on = true;
  EXPECT_TRUE(works_on_text_encoding(t));
  EXPECT_FALSE(works_on_decode(t));
  t.of<VaeBf16Options>().on = true;
  EXPECT_TRUE(works_on_text_encoding(t) && works_on_decode(t));
}

TEST(Registry, EveryFlagIsBoundToItsOwnField) {
  // Setting one flag to a value other than its default changes exactly that flag.
  for (const auto& t : all())
    for (const auto& f : t.flags) {
      SCOPED_TRACE(t.path_of(f));
      RuntimeOptions o;
      json v;
      switch (f.type) {
        case FlagType::kBool:
          v = !f.default_value().get<bool>();
          break;
        case FlagType::kInt:
          v = f.default_value().get<int64_t>() == f.int_min ? f.int_min + 1 : f.int_min;
          break;
        case FlagType::kNumber:
          v = f.max;
          break;
        case FlagType::kChoice:
          v = f.choices.back();
          break;
        case FlagType::kIntList:
          v = json::array({f.int_min, f.int_min + 1});
          break;
        case FlagType::kNumberList:
          v = json::array({f.min + 0.5, f.min + 0.25, f.min + 0.125});
          break;
      }
      ASSERT_FALSE(f.validate(v)) << v.dump();
      ASSERT_NE(v, f.default_value());
      f.set(o, v);
      EXPECT_EQ(f.get(o), v);
      EXPECT_EQ(technique_flags_set(o), std::vector<std::string>{t.path_of(f)});
    }
}

TEST(Registry, AManifestWithAFlagOfAnUnregisteredTechniqueIsRefusedByKey) {
  const std::string top = parse_error({{"radial_attention", {{"enabled", true}}}});
  EXPECT_EQ(top.rfind("m.json: flags: unknown flag 'radial_attention'", 0), 0u) << top;
  EXPECT_NE(top.find("teacache"), std::string::npos) << "the message lists the registered flags: " << top;
  EXPECT_EQ(parse_error({{"teacache", {{"enabled", true}, {"polynomial", {1, 2}}}}})
                .rfind("m.json: flags.teacache: unknown key 'polynomial'", 0),
            0u);
  EXPECT_EQ(parse_error({{"teacahe", {{"enabled", true}}}}).find("(did you mean 'teacache'?)") != std::string::npos,
            true);
  EXPECT_EQ(parse_error({{"forced_skip", {{"steps", {3, -1}}}}}),
            "m.json: flags.forced_skip.steps[1]: -1 is out of range [0, 999]");
  EXPECT_EQ(parse_error({{"teacache", {{"threshold", 0}}}}),
            "m.json: flags.teacache.threshold: 0 is out of range (0, 10]");
  EXPECT_EQ(
      parse_error({{"magcache", {{"enabled", true}}}}),
      "m.json: flags.magcache.ratios: magcache needs its calibrated magnitude-ratio schedule (run its calibration)");
  EXPECT_EQ(parse_error({{"magcache", {{"enabled", true}, {"ratios", {1.0, 0.98}}}}}), "");
  EXPECT_EQ(parse_error({{"easycache", {{"enabled", true}}}, {"teacache", {{"enabled", true}}}}),
            "m.json: flags: easycache and teacache cannot both be on (one step_cache technique at a time)");
  EXPECT_EQ(parse_error({{"first_block_cache", {{"enabled", true}, {"threshold", 0.1}}}}), "");
}

// TaylorSeer: its flags parse into its options, their ranges are checked, it excludes the other step
// caches, and it is the only technique on a fixed schedule.
TEST(Registry, TaylorSeerFlagsParseAndOnlyItIsAFixedSchedule) {
  const json on = {
      {"taylorseer",
       {{"enabled", true}, {"interval", 4}, {"order", 2}, {"warmup_steps", 0}, {"dense_last_step", false}}}};
  ASSERT_EQ(parse_error(on), "");
  const auto m = gates::parse_manifest(patch_with(on), "m");
  const RuntimeOptions o = gates::to_runtime_options(m);
  EXPECT_TRUE(o.of<TaylorSeerOptions>().enabled);
  EXPECT_EQ(o.of<TaylorSeerOptions>().interval, 4);
  EXPECT_EQ(o.of<TaylorSeerOptions>().order, 2);
  EXPECT_EQ(o.of<TaylorSeerOptions>().warmup_steps, 0);
  EXPECT_FALSE(o.of<TaylorSeerOptions>().dense_last_step);
  EXPECT_EQ(techniques_on(o), std::vector<std::string>{"taylorseer"});
  // A later group: absent from manifests that leave it off, written whole when set.
  const json flags = gates::to_json(m)["flags"];
  EXPECT_EQ(keys_of(flags["taylorseer"]),
            (std::set<std::string>{"enabled", "interval", "order", "warmup_steps", "dense_last_step"}));
  EXPECT_FALSE(
      gates::to_json(gates::parse_manifest(patch_with({{"fused_qkv", true}}), "m"))["flags"].contains("taylorseer"));
  const TaylorSeerOptions defaults;
  EXPECT_FALSE(defaults.enabled);
  EXPECT_EQ(defaults.interval, 3);
  EXPECT_EQ(defaults.order, 1);
  EXPECT_EQ(defaults.warmup_steps, 5);
  EXPECT_TRUE(defaults.dense_last_step);
  EXPECT_EQ(parse_error({{"taylorseer", {{"enabled", true}, {"interval", 1}}}}),
            "m.json: flags.taylorseer.interval: 1 is out of range [2, 50]");
  EXPECT_EQ(parse_error({{"taylorseer", {{"enabled", true}, {"order", 3}}}}),
            "m.json: flags.taylorseer.order: 3 is out of range [0, 2]");
  EXPECT_EQ(parse_error({{"easycache", {{"enabled", true}}}, {"taylorseer", {{"enabled", true}}}}),
            "m.json: flags: easycache and taylorseer cannot both be on (one step_cache technique at a time)");
  for (const auto& t : all()) EXPECT_EQ(t.fixed_schedule, t.name == "taylorseer") << t.name;
  // Engaged when it skipped, its computed forwards the transformer's.
  RuntimeOptions ts;
  ts.of<TaylorSeerOptions>().enabled = true;
  Trace tr;
  tr.add("transformer.forwards", 4);
  tr.add("cache.taylorseer.computed_forwards", 4);
  auto problems = engagement_problems(ts, tr);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "taylorseer is on but no forward was skipped (cache.taylorseer.skipped_forwards = 0)");
  tr.add("cache.taylorseer.skipped_forwards", 2);
  EXPECT_TRUE(engagement_problems(ts, tr).empty());
  tr.add("cache.taylorseer.computed_forwards", 1);
  problems = engagement_problems(ts, tr);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("taylorseer: computed forwards in its counters disagree"), std::string::npos);
  // Its search: first-order forecasts, a tenth of the steps dense, intervals 2, 3, 4, 6, 8 (n4 measured first).
  const auto points = find("taylorseer")->search(SearchContext{30, false});
  ASSERT_EQ(points.size(), 5u);
  EXPECT_EQ(points[2].label, "taylorseer-o1-n4");
  EXPECT_EQ(
      points[2].flags,
      (json{{"taylorseer",
             {{"enabled", true}, {"interval", 4}, {"order", 1}, {"warmup_steps", 3}, {"dense_last_step", true}}}}));
  std::vector<std::string> labels;
  for (const auto& p : points) labels.push_back(p.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"taylorseer-o1-n2", "taylorseer-o1-n3", "taylorseer-o1-n4",
                                              "taylorseer-o1-n6", "taylorseer-o1-n8"}));
  EXPECT_EQ(find("taylorseer")->search(SearchContext{4, false})[0].flags["taylorseer"]["warmup_steps"], 1);
}

TEST(Registry, CanonicalFormOfTheTechniquesBeforeTheRegistryIsUnchanged) {
  // A manifest with no flags resolves to exactly the flags written before the registry existed, so the
  // shipped manifests keep their canonical form and hash.
  const json flags =
      gates::to_json(gates::parse_manifest(patch_with({{"easycache", {{"enabled", true}}}}), "m"))["flags"];
  EXPECT_EQ(keys_of(flags),
            (std::set<std::string>{"dtype", "cpu_threads", "onednn", "attention_backend", "fused_qkv", "cross_kv_cache",
                                   "timestep_dedup", "cuda_graph", "easycache", "sparse"}));
  EXPECT_EQ(keys_of(flags["easycache"]),
            (std::set<std::string>{"enabled", "threshold", "warmup_steps", "dense_last_step"}));
  EXPECT_EQ(keys_of(flags["sparse"]),
            (std::set<std::string>{"pattern", "window_frames", "window_tiles", "dense_layers", "dense_steps"}));
  // A newer technique's group appears only when set, and then whole.
  const json tea = gates::to_json(gates::parse_manifest(patch_with({{"teacache", {{"enabled", true}}}}), "m"))["flags"];
  EXPECT_EQ(keys_of(tea["teacache"]), (std::set<std::string>{"enabled", "threshold", "warmup_steps", "dense_last_step",
                                                             "coefficients", "calibrate"}));
  EXPECT_EQ(tea["teacache"]["coefficients"], json::array({0.0, 1.0}));
  // Defaults spelled out or not: the same hash; a changed value: another.
  const auto h = gates::manifest_hash(gates::parse_manifest(patch_with({{"teacache", {{"enabled", true}}}}), "m"));
  EXPECT_EQ(gates::manifest_hash(gates::parse_manifest(
                patch_with({{"teacache", {{"enabled", true}, {"threshold", 0.1}, {"calibrate", false}}},
                            {"forced_skip", {{"steps", json::array()}}}}),
                "m")),
            h);
  EXPECT_NE(gates::manifest_hash(
                gates::parse_manifest(patch_with({{"teacache", {{"enabled", true}, {"threshold", 0.2}}}}), "m")),
            h);
  // The off run keeps the settings only.
  const auto m = gates::parse_manifest(patch_with({{"dtype", "fp32"}, {"forced_skip", {{"steps", {2, 3}}}}}), "m");
  EXPECT_EQ(gates::technique_flags_set(m), std::vector<std::string>{"forced_skip.steps"});
  EXPECT_TRUE(gates::technique_flags_set(gates::with_flags_off(m)).empty());
  EXPECT_EQ(gates::to_runtime_options(gates::with_flags_off(m)).dtype, "fp32");
}

TEST(Registry, EngagementNamesTheCounterOfEveryTechniqueThatIsOn) {
  RuntimeOptions o;
  o.of<AttentionBackendOptions>().backend = "math";
  o.of<FusedQkvOptions>().on = true;
  o.of<TeaCacheOptions>().enabled = true;
  Trace t;
  auto problems = engagement_problems(o, t);
  const std::set<std::string> got(problems.begin(), problems.end());
  EXPECT_TRUE(got.count("attention_backend math is set but no attention ran on it (kernel.attention.math.calls = 0)"));
  EXPECT_TRUE(got.count("fused_qkv is on but no fused QKV projection ran (kernel.fused_qkv.launches = 0)"));
  EXPECT_TRUE(got.count("teacache is on but no block stack was skipped (cache.teacache.skipped_forwards = 0)"));
  t.add("kernel.attention.math.calls");
  t.add("kernel.fused_qkv.launches");
  t.add("transformer.forwards", 4);
  t.add("cache.teacache.computed_forwards", 3);
  t.add("cache.teacache.skipped_forwards", 1);
  EXPECT_TRUE(engagement_problems(o, t).empty());
  t.add("cache.teacache.skipped_forwards", 1);  // more decisions than forwards: inconsistent counters
  problems = engagement_problems(o, t);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("teacache: its computed and skipped forwards disagree"), std::string::npos);
}

// A technique that another one on leaves idle: named as such, with the one that does its work, so that a
// hand-written manifest's author knows which flag to drop (the kernel-hopper manifest had both).
TEST(Registry, AnIdleSupersededTechniqueIsNamedWithTheOneThatDoesItsWork) {
  RuntimeOptions o;
  o.of<AttentionBackendOptions>().backend = "cudnn";
  o.of<HopperAttentionOptions>().variant = 6;
  o.of<TimestepDedupOptions>().on = true;
  o.of<UniformTimestepOptions>().on = true;
  o.of<GeluEpilogueOptions>().on = true;  // no quant.fp8: not superseded
  EXPECT_EQ(superseded(o), (std::vector<std::pair<std::string, std::string>>{{"attention_backend", "hopper_attention"},
                                                                             {"timestep_dedup", "uniform_timestep"}}));
  o.of<QuantOptions>().fp8 = true;
  EXPECT_EQ(superseded(o).size(), 3u);
  o.of<HopperAttentionOptions>().variant = 0;
  EXPECT_EQ(superseded(o).size(), 2u);
  o.of<HopperAttentionOptions>().variant = 6;
  Trace t;
  t.add("kernel.hopper_attention.calls");
  t.add("kernel.uniform_timestep.samples", 2);
  t.add("quant.fp8.gemms", 6);
  const auto problems = engagement_problems(o, t);
  const std::set<std::string> got(problems.begin(), problems.end());
  EXPECT_EQ(got,
            (std::set<std::string>{
                "attention_backend cudnn is set but no attention ran on it (kernel.attention.cudnn.calls = 0); "
                "hopper_attention is on and does its work: leave attention_backend out",
                "timestep_dedup is on but no time-embedding row was saved (kernel.timestep_dedup.rows_saved = 0); "
                "uniform_timestep is on and does its work: leave timestep_dedup out",
                "gelu_epilogue is on but no GEMM with a GELU epilogue ran (needs a CUDA build and bf16 on the GPU) "
                "(kernel.gelu_epilogue.launches = 0); fp8 is on and does its work: leave gelu_epilogue out"}));
}

TEST(Registry, CalibrationsFitWhatTheirRunsRecorded) {
  // TeaCache: pairs on y = 0.1 + 2x + 3x^2 give back those coefficients.
  Trace tr;
  for (int step = 1; step < 20; ++step)
    for (int b = 0; b < 2; ++b) {
      const double x = 0.01 * step + 0.003 * b;
      char s[8];
      std::snprintf(s, sizeof s, "%04d", step);
      tr.add("cache.teacache.calibration.input." + std::to_string(b) + "." + s, x);
      tr.add("cache.teacache.calibration.output." + std::to_string(b) + "." + s, 0.1 + 2 * x + 3 * x * x);
    }
  const json tea = find("teacache")->calibration->fit({tr});
  const auto c = tea["teacache"]["coefficients"].get<std::vector<double>>();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_NEAR(c[0], 0.1, 1e-6);
  EXPECT_NEAR(c[1], 2.0, 1e-5);
  EXPECT_NEAR(c[2], 3.0, 1e-4);
  // Too few pairs: the identity.
  EXPECT_EQ(find("teacache")->calibration->fit({Trace{}})["teacache"]["coefficients"], json::array({0.0, 1.0}));

  // MagCache: the mean ratio per branch and step over the runs; step 0 (no previous residual) is 1.
  Trace a, b;
  a.add("cache.magcache.calibration.ratio.0.0001", 0.9);
  b.add("cache.magcache.calibration.ratio.0.0001", 0.7);
  a.add("cache.magcache.calibration.ratio.0.0002", 0.95);
  b.add("cache.magcache.calibration.ratio.0.0002", 0.95);
  a.add("cache.magcache.calibration.ratio.1.0001", 0.5);
  a.add("cache.magcache.calibration.ratio.1.0002", 0.6);
  const json mag = find("magcache")->calibration->fit({a, b})["magcache"];
  const auto r = mag["ratios"].get<std::vector<double>>();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0], 1.0);
  EXPECT_DOUBLE_EQ(r[1], 0.8);
  EXPECT_DOUBLE_EQ(r[2], 0.95);
  EXPECT_EQ(mag["ratios_uncond"], json::array({1.0, 0.5, 0.6}));
  // The fitted schedule makes a valid manifest.
  json flags = {{"magcache", {{"enabled", true}}}};
  flags.merge_patch(find("magcache")->calibration->fit({a, b}));
  EXPECT_EQ(parse_error(flags), "");
}

TEST(Registry, SearchSpacesAreValidManifestFlags) {
  for (bool gpu : {false, true})
    for (const auto& t : all()) {
      if (!t.search) continue;
      for (auto p : t.search(SearchContext{50, gpu})) {
        SCOPED_TRACE(t.name + " " + p.label);
        if (t.calibration) p.flags.merge_patch(t.calibration->fit({Trace{}}));
        if (t.name == "magcache") p.flags["magcache"]["ratios"] = {1.0, 0.99};
        EXPECT_EQ(parse_error(p.flags), "");
        EXPECT_TRUE(t.on(gates::to_runtime_options(gates::parse_manifest(patch_with(p.flags), "m"))));
      }
    }
  EXPECT_FALSE(find("forced_skip")->search) << "the benchmarking schedule is never proposed";
}

struct CliRun {
  int code;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  FILE* p = popen((std::string(AUTOOPTIM_BIN) + " " + args + " 2>/dev/null").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Registry, TechniquesJsonListsTheRegistry) {
  const CliRun r = run_cli("techniques --json --steps 20 --gpu");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(keys_of(j), (std::set<std::string>{"techniques", "settings", "search_context"}));
  EXPECT_EQ(keys_of(j["settings"]), (std::set<std::string>{"dtype", "cpu_threads", "onednn"}));
  EXPECT_EQ(j["search_context"], (json{{"steps", 20}, {"gpu", true}}));
  std::set<std::string> names;
  for (const auto& t : j["techniques"]) {
    names.insert(t["name"].get<std::string>());
    EXPECT_EQ(keys_of(t),
              (std::set<std::string>{"name", "family", "lossless", "summary", "flags", "switch", "exclusive_group",
                                     "hooks", "supersedes", "engagement", "search_space", "calibration"}));
    for (const auto& s : t["supersedes"]) EXPECT_NE(find(s.get<std::string>()), nullptr) << s;
    const Technique* reg = find(t["name"]);
    ASSERT_NE(reg, nullptr);
    std::set<std::string> paths;
    for (const auto& f : reg->flags) paths.insert(reg->path_of(f));
    EXPECT_EQ(keys_of(t["flags"]), paths);
    for (const auto& [path, f] : t["flags"].items()) {
      const std::set<std::string> k = keys_of(f);
      EXPECT_TRUE(k.count("type") && k.count("default") && k.count("help")) << path;
    }
    for (const auto& e : t["engagement"]) EXPECT_EQ(keys_of(e), (std::set<std::string>{"counter", "not_engaged"}));
    for (const auto& p : t["search_space"]) EXPECT_EQ(keys_of(p), (std::set<std::string>{"label", "flags"}));
  }
  std::set<std::string> registered;
  for (const auto& t : all()) registered.insert(t.name);
  EXPECT_EQ(names, registered);
  // GPU-only search points appear with --gpu; the dense warm-up follows --steps.
  const json& techniques = j["techniques"];
  auto entry = [&](const std::string& name) {
    for (const auto& t : techniques)
      if (t["name"] == name) return t;
    return json();
  };
  EXPECT_EQ(entry("cuda_graph")["search_space"].size(), 1u);
  EXPECT_EQ(entry("easycache")["search_space"][0]["flags"]["easycache"]["warmup_steps"], 2);  // a tenth of the steps
  EXPECT_EQ(entry("easycache")["search_space"][0]["flags"]["easycache"]["order"], 1);
  const CliRun cpu = run_cli("techniques --json");
  ASSERT_EQ(cpu.code, 0);
  std::set<std::string> searched_on_cpu;
  const json cpu_listing = json::parse(cpu.out);  // named: a range-for over a temporary's member would dangle
  for (const auto& t : cpu_listing["techniques"])
    if (!t["search_space"].empty()) searched_on_cpu.insert(t["name"].get<std::string>());
  // The CUDA-only switches are not proposed on a CPU; the VAE switches oneDNN runs are (measured there).
  for (const char* gpu_only :
       {"cuda_graph", "vae_cudnn_benchmark", "vae_fused_norm_silu", "vae_fused_shortcut", "fused_norm_modulate",
        "vae_frame_convs", "rope_cache", "vae_transposed_upsample", "vae_head_pad", "fused_cross_norm", "gemm_autotune",
        "vae_pointwise_gemm", "vae_causal_ring", "hopper_attention", "vae_cuda_graph"})
    EXPECT_FALSE(searched_on_cpu.count(gpu_only)) << gpu_only;
  for (const char* cpu_too :
       {"vae_bf16", "vae_channels_last", "vae_causal_buffer", "text_trim", "cross_kv_cache", "uniform_timestep"})
    EXPECT_TRUE(searched_on_cpu.count(cpu_too)) << cpu_too;
  EXPECT_EQ(run_cli("techniques --steps 0").code, 2);
  EXPECT_EQ(run_cli("techniques").code, 0);
}

// The store RuntimeOptions holds the techniques' options in: an absent struct reads as its default without
// being added, a copy is deep, and the flags read and write the struct the code reads.
TEST(TechniqueOptions, DefaultsDeepCopiesAndTheFlagsBindTheStoredStruct) {
  RuntimeOptions o;
  EXPECT_FALSE(o.techniques.has<EasyCacheOptions>());
  const RuntimeOptions& read = o;
  EXPECT_DOUBLE_EQ(read.of<EasyCacheOptions>().threshold, EasyCacheOptions{}.threshold);
  EXPECT_FALSE(o.techniques.has<EasyCacheOptions>());  // reading added nothing
  EXPECT_EQ(flags_to_json(o), flags_to_json(RuntimeOptions{}));

  o.of<EasyCacheOptions>().threshold = 0.2;
  o.of<AttentionBackendOptions>().backend = "math";
  RuntimeOptions copy = o;
  copy.of<EasyCacheOptions>().threshold = 0.3;
  EXPECT_DOUBLE_EQ(o.of<EasyCacheOptions>().threshold, 0.2);  // the copy has its own struct
  EXPECT_EQ(copy.of<AttentionBackendOptions>().backend, "math");
  copy = o;
  EXPECT_DOUBLE_EQ(copy.of<EasyCacheOptions>().threshold, 0.2);
  RuntimeOptions moved = std::move(copy);
  EXPECT_EQ(moved.of<AttentionBackendOptions>().backend, "math");

  const Technique* easycache = find("easycache");
  ASSERT_NE(easycache, nullptr);
  EXPECT_EQ(easycache->flag("threshold")->get(o), 0.2);
  easycache->flag("threshold")->set(o, 0.4);
  EXPECT_DOUBLE_EQ(o.of<EasyCacheOptions>().threshold, 0.4);
}

}  // namespace
}  // namespace autooptim::runtime::techniques
