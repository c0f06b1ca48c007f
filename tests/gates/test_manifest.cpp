// Manifests: strict parsing with errors naming file and key, the resolved canonical form, the
// content hash, the mapping onto RuntimeOptions, and every shipped manifest file.
#include <gtest/gtest.h>

#include <fstream>

#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "gates/manifest.h"
#include "runtime/techniques/registry.h"
#include "base/error.h"
#include "test_util.h"
#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/techniques/kernel/attention_backend_options.h"
#include "runtime/techniques/kernel/cross_kv_cache_options.h"
#include "runtime/techniques/kernel/cuda_graph_options.h"
#include "runtime/techniques/kernel/fused_gate_residual_options.h"
#include "runtime/techniques/kernel/fused_norm_modulate_options.h"
#include "runtime/techniques/kernel/fused_qk_norm_rope_options.h"
#include "runtime/techniques/kernel/fused_qkv_options.h"
#include "runtime/techniques/kernel/gelu_epilogue_options.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/quant/fp8_linear_options.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"

namespace autooptim::gates {
namespace {

using nlohmann::json;

json valid_patch() {
  return json::parse(R"({
    "id": "wan22-tiny/cache/ec-0.1",
    "kind": "patch",
    "family": "cache",
    "model": "wan22-tiny",
    "runtime": "autooptim/1",
    "base": "wan22-tiny/baseline",
    "flags": {"easycache": {"enabled": true, "threshold": 0.1}},
    "lossless": false,
    "config": {"height": 96, "width": 160, "frames": 49, "fps": 24, "steps": 50,
               "guidance": 5.0, "seed": 42, "flow_shift": 5.0},
    "description": "EasyCache at 0.1"
  })");
}

// The message of the Error that loading the file raises ("" when it loads).
std::string error_of_load(const std::string& path) {
  try {
    load_manifest(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of the Error that parsing `j` raises ("" when it parses).
std::string parse_error(const json& j, const std::string& label = "manifests/x.json") {
  try {
    parse_manifest(j, label);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "expected '" << part << "' in '" << text << "'";
}

std::string mutated_error(const std::function<void(json&)>& mutate) {
  json j = valid_patch();
  mutate(j);
  return parse_error(j);
}

TEST(Manifest, ParsesAValidPatch) {
  const Manifest m = parse_manifest(valid_patch(), "x");
  EXPECT_EQ(m.id, "wan22-tiny/cache/ec-0.1");
  EXPECT_EQ(m.kind, "patch");
  EXPECT_EQ(m.family, "cache");
  ASSERT_TRUE(m.base.has_value());
  EXPECT_EQ(*m.base, "wan22-tiny/baseline");
  EXPECT_FALSE(m.lossless);
  EXPECT_EQ(m.config, official_config("wan22-tiny"));
  EXPECT_EQ(m.description, "EasyCache at 0.1");
  EXPECT_TRUE(m.parents.empty());
}

TEST(Manifest, ErrorsNameFileAndKeyPath) {
  EXPECT_EQ(mutated_error([](json& j) { j["flags"]["easycache"]["threshold"] = 1.7; }),
            "manifests/x.json: flags.easycache.threshold: 1.7 is out of range (0, 1]");
  EXPECT_EQ(mutated_error([](json& j) { j["config"]["frames"] = 40; }),
            "manifests/x.json: config.frames: 40 is not 4k+1");
  EXPECT_EQ(mutated_error([](json& j) { j["config"]["height"] = 700; }),
            "manifests/x.json: config.height: 700 is not a multiple of 32 (wan22-tiny)");
  expect_contains(mutated_error([](json& j) { j["flgs"] = json::object(); }), "manifests/x.json: unknown key 'flgs'");
  expect_contains(mutated_error([](json& j) { j["flags"]["fuse_qkv"] = true; }),
                  "manifests/x.json: flags: unknown flag 'fuse_qkv' (did you mean 'fused_qkv'?)");
  expect_contains(mutated_error([](json& j) { j["flags"]["easycache"]["thresh"] = 0.1; }),
                  "manifests/x.json: flags.easycache: unknown key 'thresh'");
  expect_contains(mutated_error([](json& j) { j["config"]["cfg"] = 1; }),
                  "manifests/x.json: config: unknown key 'cfg'");
}

TEST(Manifest, RejectsWrongTypesAndRanges) {
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j.erase("config"); }, "missing key 'config'"},
      {[](json& j) { j["config"].erase("seed"); }, "config: missing key 'seed'"},
      {[](json& j) { j["id"] = "Bad Id"; }, "id: 'Bad Id' must match"},
      {[](json& j) { j["id"] = 7; }, "id: expected a string"},
      {[](json& j) { j["kind"] = "candidate"; }, "kind: 'candidate' is not one of"},
      {[](json& j) { j["family"] = "quantum"; }, "family: 'quantum' is not one of"},
      {[](json& j) { j["model"] = "wan21"; }, "model: 'wan21' is not one of"},
      {[](json& j) { j["runtime"] = ""; }, "runtime: must not be empty"},
      {[](json& j) { j["lossless"] = "yes"; }, "lossless: expected true or false"},
      {[](json& j) { j["flags"] = json::array(); }, "flags: expected an object"},
      {[](json& j) { j["flags"]["dtype"] = "fp16"; }, "flags.dtype: 'fp16' is not one of"},
      {[](json& j) { j["flags"]["cpu_threads"] = 300; }, "flags.cpu_threads: 300 is out of range [0, 256]"},
      {[](json& j) { j["flags"]["cpu_threads"] = -1; }, "flags.cpu_threads: -1 is out of range"},
      {[](json& j) { j["flags"]["attention_backend"] = "sdpa"; }, "flags.attention_backend: 'sdpa' is not one of"},
      {[](json& j) { j["flags"]["cuda_graph"] = 1; }, "flags.cuda_graph: expected true or false"},
      {[](json& j) { j["flags"]["easycache"] = true; }, "flags.easycache: expected an object"},
      {[](json& j) { j["flags"]["easycache"]["threshold"] = 0; },
       "flags.easycache.threshold: 0 is out of range (0, 1]"},
      {[](json& j) { j["flags"]["easycache"]["warmup_steps"] = 0; }, "flags.easycache.warmup_steps: 0 is out of range"},
      {[](json& j) { j["flags"]["easycache"]["warmup_steps"] = 2.5; },
       "flags.easycache.warmup_steps: expected an integer"},
      {[](json& j) {
         j["flags"]["sparse"] = {{"pattern", "radial"}};
       },
       "flags.sparse.pattern: 'radial' is not one of"},
      {[](json& j) {
         j["flags"]["sparse"] = {{"window_frames", -1}};
       },
       "flags.sparse.window_frames: -1 is out of range"},
      {[](json& j) {
         j["flags"]["sparse"] = {{"dense_steps", "5"}};
       },
       "flags.sparse.dense_steps: expected an integer"},
      {[](json& j) { j["config"]["frames"] = 121.0; }, "config.frames: expected an integer"},
      {[](json& j) { j["config"]["width"] = 0; }, "config.width: 0 is out of range"},
      {[](json& j) { j["config"]["steps"] = 0; }, "config.steps: 0 is out of range [1, 1000]"},
      {[](json& j) { j["config"]["steps"] = 1001; }, "config.steps: 1001 is out of range [1, 1000]"},
      {[](json& j) { j["config"]["steps"] = "50"; }, "config.steps: expected an integer, got string \"50\""},
      {[](json& j) { j["config"]["guidance"] = -1; }, "config.guidance: -1 is out of range [0, 50]"},
      {[](json& j) { j["config"]["guidance"] = 51; }, "config.guidance: 51 is out of range [0, 50]"},
      {[](json& j) { j["config"]["seed"] = -3; }, "config.seed: -3 is out of range"},
      {[](json& j) { j["config"]["fps"] = 0; }, "config.fps: 0 must be at least 0.001"},
      {[](json& j) { j["config"]["fps"] = 1e-300; }, "config.fps: 1e-300 must be at least 0.001"},
      {[](json& j) { j["config"]["flow_shift"] = -5.0; }, "config.flow_shift: -5.0 must be > 0"},
      {[](json& j) { j["description"] = 3; }, "description: expected a string"},
      {[](json& j) { j["parents"] = "a"; }, "parents: expected an array"},
      {[](json& j) {
         j["parents"] = json::array({"ok", "Not OK"});
       },
       "parents[1]: 'Not OK' must match"},
      {[](json& j) { j["base"] = nullptr; }, "base: is null, but only a baseline may have no base"},
      {[](json& j) { j["base"] = j["id"]; }, "base: a manifest cannot be its own base"},
      {[](json& j) { j["family"] = "none"; }, "family: a patch must name its technique family"},
      {[](json& j) { j["kind"] = "baseline"; }, "base: must be null for a baseline"},
      {[](json& j) {
         j["kind"] = "baseline";
         j["base"] = nullptr;
       },
       "flags: a baseline sets no technique flags, but sets: easycache.enabled, easycache.threshold"},
      {[](json& j) { j["flags"]["vae_head_pad"] = 12; },
       "flags.vae_head_pad: must be 0 (off) or a multiple of 8, got 12"},
      {[](json& j) { j["flags"]["vae_head_pad"] = 512; }, "flags.vae_head_pad: 512 is out of range [0, 256]"},
      {[](json& j) { j["flags"]["vae_causal_ring"] = 1; },
       "flags.vae_causal_ring: must be 0 (off) or at least 2 chunks, got 1"},
      {[](json& j) { j["flags"]["vae_causal_ring"] = 17; }, "flags.vae_causal_ring: 17 is out of range [0, 16]"},
      {[](json& j) {
         j["flags"]["vae_subpixel_upsample"] = true;
         j["flags"]["vae_transposed_upsample"] = true;
       },
       "flags: vae_subpixel_upsample and vae_transposed_upsample cannot both be on (one vae_upsample technique at a "
       "time)"},
  };
  for (const auto& [mutate, expected] : cases) {
    const std::string message = mutated_error(mutate);
    expect_contains(message, expected);
    EXPECT_EQ(message.rfind("manifests/x.json: ", 0), 0u) << message;
  }
  EXPECT_EQ(parse_error(json::array()), "manifests/x.json: expected an object, got array []");
  EXPECT_EQ(parse_error(json{{"kind", "baseline"}}, ""), "missing key 'id'");
}

TEST(Manifest, LoadNamesTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("m.json");
  json j = valid_patch();
  j["flags"]["easycache"]["threshold"] = 1.7;
  test::write_bytes(path, j.dump(2));
  try {
    load_manifest(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": flags.easycache.threshold: 1.7 is out of range (0, 1]");
  }

  test::write_bytes(path, "{\"id\": ");
  EXPECT_THROW(load_manifest(path), Error);
  // A number beyond double's range is an error naming the file, not an escaped json::out_of_range (the
  // manifest fuzzer found 1E444 ending the process through std::terminate).
  test::write_bytes(path, "{\"flags\": {\"cpu_threads\": 1E444}}");
  try {
    load_manifest(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": invalid JSON: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("number overflow"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_manifest(dir.file("missing.json")), Error);

  // The last of two duplicated keys would win silently; refuse instead.
  std::string text = valid_patch().dump(2);
  text.insert(text.find("\"threshold\""), "\"threshold\": 0.9, ");
  test::write_bytes(path, text);
  try {
    load_manifest(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": duplicated key 'threshold'");
  }
}

TEST(Manifest, HostileFilesAreRefusedWithTheKeyNamed) {
  test::TempDir dir;
  const std::string path = dir.file("m.json");
  // 100,000 and 1,000,000 levels deep under several keys: an error naming the key, not a SIGSEGV.
  for (const char* key : {"runtime", "base", "lossless", "flags"}) {
    for (const size_t depth : {100000, 1000000}) {
      std::string text = valid_patch().dump();
      const std::string needle = std::string("\"") + key + "\":";
      const size_t at = text.find(needle);
      ASSERT_NE(at, std::string::npos) << key;
      text.insert(at + needle.size(), std::string(depth, '[') + std::string(depth, ']') + ",\"x" + key + "\":");
      test::write_bytes(path, text);
      const std::string message = error_of_load(path);
      EXPECT_NE(message.find(path + ": nesting deeper than 64 levels at '" + std::string(key) + "'"), std::string::npos)
          << message.substr(0, 200);
    }
  }
  std::string text = valid_patch().dump();
  std::string nested;
  for (int i = 0; i < 5000; ++i) nested += "{\"a\":";
  nested += "1" + std::string(5000, '}');
  text.insert(text.find("\"threshold\":") + 12, nested + ",\"t\":");
  test::write_bytes(path, text);
  EXPECT_NE(error_of_load(path).find("at 'flags.easycache.threshold"), std::string::npos)
      << error_of_load(path).substr(0, 200);
  // NUL byte with junk after it (nlohmann stops at the NUL).
  test::write_bytes(path, valid_patch().dump() + std::string(1, '\0') + "{\"junk\"");
  EXPECT_NE(error_of_load(path).find("NUL byte"), std::string::npos) << error_of_load(path);
  // Ids name folders of the run: no "." or ".." segment, no empty one.
  for (const char* id : {"wan22-tiny/../../x", "..", "wan22-tiny//x", "/abs", "wan22-tiny/./x", "x/"}) {
    json j = valid_patch();
    j["id"] = id;
    EXPECT_NE(parse_error(j).find("id: '" + std::string(id) + "' must match"), std::string::npos)
        << id << ": " << parse_error(j);
  }
  json j = valid_patch();
  j["id"] = "wan22-tiny/cache/ec-0.1.off";
  EXPECT_EQ(parse_error(j), "");
  // A frame rate no video container can hold.
  j = valid_patch();
  j["config"]["fps"] = 1e308;
  EXPECT_NE(parse_error(j).find("config.fps: 1e+308 is out of range (0, 1000]"), std::string::npos) << parse_error(j);
}

TEST(Manifest, ResolvedJsonHasEveryFlagAndRoundTrips) {
  const Manifest m = parse_manifest(valid_patch(), "x");
  const json j = to_json(m);
  const json& flags = j["flags"];
  for (const char* name : {"dtype", "cpu_threads", "attention_backend", "fused_qkv", "cross_kv_cache", "timestep_dedup",
                           "cuda_graph", "easycache", "sparse"}) {
    EXPECT_TRUE(flags.contains(name)) << name;
  }
  EXPECT_EQ(flags["easycache"],
            (json{{"enabled", true}, {"threshold", 0.1}, {"warmup_steps", 10}, {"dense_last_step", true}}));
  EXPECT_EQ(flags["sparse"]["pattern"], "none");
  EXPECT_EQ(flags["dtype"], "bf16");
  EXPECT_EQ(j["base"], "wan22-tiny/baseline");
  EXPECT_EQ(j["description"], "EasyCache at 0.1");

  const Manifest again = parse_manifest(j, "resolved");
  EXPECT_EQ(to_json(again), j);
  EXPECT_EQ(manifest_hash(again), manifest_hash(m));
}

TEST(Manifest, HashIgnoresCosmeticsOnly) {
  const Manifest m = parse_manifest(valid_patch(), "x");
  const std::string h = manifest_hash(m);
  EXPECT_EQ(h.size(), 64u);

  json cosmetic = valid_patch();
  cosmetic["id"] = "another/name";
  cosmetic["description"] = "reworded";
  cosmetic["config"]["guidance"] = 5;      // 5 vs 5.0
  cosmetic["flags"]["fused_qkv"] = false;  // a default written out
  cosmetic["flags"]["easycache"]["warmup_steps"] = 10;
  cosmetic["flags"]["easycache"]["order"] = 0;  // a default that is not written (manifests from before it)
  cosmetic["flags"]["dtype"] = "bf16";
  cosmetic.erase("description");
  EXPECT_EQ(manifest_hash(parse_manifest(cosmetic, "y")), h);
  // Labels and provenance are not what runs: a retry that changes only them is the same candidate.
  json relabelled = valid_patch();
  relabelled["runtime"] = "autooptim/2";
  relabelled["parents"] = {"wan22-tiny/cache/a", "wan22-tiny/kernel/b"};
  relabelled["family"] = "composite";
  EXPECT_EQ(manifest_hash(parse_manifest(relabelled, "y")), h);

  for (const auto& change : std::vector<std::function<void(json&)>>{
           [](json& j) { j["flags"]["easycache"]["threshold"] = 0.11; },
           [](json& j) { j["flags"]["easycache"]["order"] = 1; },
           [](json& j) { j["flags"]["cuda_graph"] = true; },
           [](json& j) { j["config"]["seed"] = 43; },
           [](json& j) { j["config"]["steps"] = 40; },
           [](json& j) { j["base"] = "wan22-tiny/other"; },
           [](json& j) { j["lossless"] = true; },
       }) {
    json j = valid_patch();
    change(j);
    EXPECT_NE(manifest_hash(parse_manifest(j, "z")), h) << j.dump();
  }
}

TEST(Manifest, MapsFlagsOntoRuntimeOptions) {
  const runtime::RuntimeOptions defaults = to_runtime_options(parse_manifest(valid_patch(), "x"));
  EXPECT_TRUE(defaults.of<runtime::EasyCacheOptions>().enabled);
  EXPECT_EQ(defaults.of<runtime::EasyCacheOptions>().order, 0);
  {
    json f = valid_patch();
    f["flags"]["easycache"]["order"] = 1;
    const Manifest fm = parse_manifest(f, "x");
    EXPECT_EQ(to_runtime_options(fm).of<runtime::EasyCacheOptions>().order, 1);
    EXPECT_EQ(to_json(fm)["flags"]["easycache"]["order"], 1);
    f["flags"]["easycache"]["order"] = 2;
    EXPECT_NE(parse_error(f).find("flags.easycache.order"), std::string::npos) << parse_error(f);
  }
  EXPECT_DOUBLE_EQ(defaults.of<runtime::EasyCacheOptions>().threshold, 0.1);
  EXPECT_FALSE(defaults.of<runtime::FusedQkvOptions>().on);

  json j = valid_patch();
  j["family"] = "composite";
  j["parents"] = json::array({"a", "b"});
  j["flags"] = json::parse(R"({
    "dtype": "fp32", "cpu_threads": 3, "attention_backend": "flash", "fused_qkv": true,
    "cross_kv_cache": true, "timestep_dedup": true, "cuda_graph": true,
    "easycache": {"enabled": true, "threshold": 0.25, "warmup_steps": 4, "dense_last_step": false},
    "sparse": {"pattern": "tile_window", "window_frames": 2, "window_tiles": 3, "dense_layers": 0, "dense_steps": 7}
  })");
  const Manifest m = parse_manifest(j, "x");
  const runtime::RuntimeOptions o = to_runtime_options(m);
  EXPECT_EQ(o.dtype, "fp32");
  EXPECT_EQ(o.cpu_threads, 3);
  EXPECT_EQ(o.of<runtime::AttentionBackendOptions>().backend, "flash");
  EXPECT_TRUE(o.of<runtime::FusedQkvOptions>().on && o.of<runtime::CrossKvCacheOptions>().on &&
              o.of<runtime::TimestepDedupOptions>().on && o.of<runtime::CudaGraphOptions>().on);
  EXPECT_TRUE(o.of<runtime::EasyCacheOptions>().enabled);
  EXPECT_DOUBLE_EQ(o.of<runtime::EasyCacheOptions>().threshold, 0.25);
  EXPECT_EQ(o.of<runtime::EasyCacheOptions>().warmup_steps, 4);
  EXPECT_FALSE(o.of<runtime::EasyCacheOptions>().dense_last_step);
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().pattern, "tile_window");
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().window_frames, 2);
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().window_tiles, 3);
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().dense_layers, 0);
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().dense_steps, 7);
  EXPECT_EQ(m.parents, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(flags_to_json(o), to_json(m)["flags"]);

  EXPECT_EQ(technique_flags_set(m),
            (std::vector<std::string>{"attention_backend", "cross_kv_cache", "cuda_graph", "easycache.dense_last_step",
                                      "easycache.enabled", "easycache.threshold", "easycache.warmup_steps", "fused_qkv",
                                      "sparse.dense_layers", "sparse.dense_steps", "sparse.pattern",
                                      "sparse.window_frames", "sparse.window_tiles", "timestep_dedup"}));

  const Manifest off = with_flags_off(m);
  EXPECT_TRUE(technique_flags_set(off).empty());
  const runtime::RuntimeOptions off_options = to_runtime_options(off);
  EXPECT_EQ(off_options.dtype, "fp32");
  EXPECT_EQ(off_options.cpu_threads, 3);
  EXPECT_FALSE(off_options.of<runtime::EasyCacheOptions>().enabled);
  EXPECT_EQ(off_options.of<runtime::SparseAttentionOptions>().pattern, "none");
  EXPECT_EQ(off.config, m.config);
  EXPECT_EQ(off.model, m.model);
  EXPECT_EQ(off.id, m.id + ".off");
  EXPECT_EQ(off.kind, "control");
  EXPECT_EQ(off.base, m.base);
  // The off run is itself a valid manifest.
  EXPECT_EQ(manifest_hash(parse_manifest(to_json(off), "off")), manifest_hash(off));
}

TEST(Manifest, OfficialConfigs) {
  const RunConfig big = official_config("wan22-ti2v-5b");
  EXPECT_EQ(big.height, 704);
  EXPECT_EQ(big.width, 1280);
  EXPECT_EQ(big.frames, 121);
  EXPECT_EQ(big.fps, 24);
  EXPECT_EQ(big.steps, 50);
  EXPECT_EQ(big.guidance, 5.0);
  EXPECT_EQ(big.seed, 42);
  EXPECT_EQ(big.flow_shift, 5.0);
  const RunConfig tiny = official_config("wan22-tiny");
  EXPECT_EQ(tiny.height, 96);
  EXPECT_EQ(tiny.width, 160);
  EXPECT_EQ(tiny.frames, 49);
  EXPECT_NE(tiny, big);
  RunConfig other = tiny;
  other.seed = 1;
  EXPECT_NE(other, tiny);
  EXPECT_THROW(official_config("sd15"), Error);
}

TEST(ShippedManifests, EveryFileValidates) {
  const std::filesystem::path root = std::filesystem::path(AUTOOPTIM_SOURCE_DIR) / "manifests";
  std::map<std::string, Manifest> by_id;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    Manifest m;
    ASSERT_NO_THROW(m = load_manifest(entry.path().string()));
    // The id is the file's path under manifests/, and the folder is the model.
    const std::string relative = std::filesystem::relative(entry.path(), root).replace_extension("").generic_string();
    EXPECT_EQ(m.id, relative);
    EXPECT_EQ(m.model, entry.path().parent_path().filename().string());
    EXPECT_TRUE(by_id.emplace(m.id, m).second) << "duplicate id " << m.id;
    // No switch another one on leaves idle: the gate would fail it for engagement (kernel-vae and
    // kernel-hopper-vae had vae_frame_convs beside vae_pointwise_gemm, which takes every conv it would run).
    EXPECT_TRUE(runtime::techniques::superseded(to_runtime_options(m)).empty());
  }
  for (const char* id :
       {"wan22-ti2v-5b/baseline", "wan22-ti2v-5b/control-fp32", "wan22-tiny/baseline", "wan22-tiny/control-fp64"}) {
    ASSERT_TRUE(by_id.count(id)) << id;
  }
  for (const auto& [id, m] : by_id) {
    SCOPED_TRACE(id);
    if (m.base) {
      ASSERT_TRUE(by_id.count(*m.base)) << "base " << *m.base << " is not shipped";
      EXPECT_EQ(by_id.at(*m.base).model, m.model);
    }
    if (m.kind == "baseline") {
      EXPECT_EQ(m.config, official_config(m.model));
    }
  }
  EXPECT_EQ(to_runtime_options(by_id.at("wan22-ti2v-5b/control-fp32")).dtype, "fp32");
  EXPECT_EQ(to_runtime_options(by_id.at("wan22-ti2v-5b/baseline")).dtype, "bf16");
  EXPECT_EQ(to_runtime_options(by_id.at("wan22-tiny/control-fp64")).dtype, "fp64");
  EXPECT_EQ(to_runtime_options(by_id.at("wan22-tiny/baseline")).cpu_threads, 0);
  EXPECT_EQ(by_id.at("wan22-ti2v-5b/control-fp32").kind, "control");
  EXPECT_EQ(by_id.at("wan22-tiny/control-fp64").kind, "control");
  // A control differs from its baseline only in the switch it names.
  EXPECT_NE(manifest_hash(by_id.at("wan22-tiny/control-fp64")), manifest_hash(by_id.at("wan22-tiny/baseline")));
}

// The fused kernels, the quant family and the frame-window query chunks: parsed onto the options,
// written back only when on (so older manifests keep their canonical form and hash), and round-tripped.
TEST(Manifest, KernelQuantAndFrameWindowFlagsRoundTrip) {
  const std::string plain_hash = manifest_hash(parse_manifest(valid_patch(), "x"));
  EXPECT_FALSE(to_json(parse_manifest(valid_patch(), "x"))["flags"].contains("quant"));
  json j = valid_patch();
  j["family"] = "composite";  // quant and sparse together
  j["flags"] = json::parse(R"({
    "fused_norm_modulate": true, "fused_gate_residual": true, "fused_qk_norm_rope": true, "gelu_epilogue": true,
    "quant": {"fp8": true},
    "sparse": {"pattern": "frame_window", "window_frames": 2, "query_frames": 4}
  })");
  const Manifest m = parse_manifest(j, "x");
  const runtime::RuntimeOptions o = to_runtime_options(m);
  EXPECT_TRUE(o.of<runtime::FusedNormModulateOptions>().on && o.of<runtime::FusedGateResidualOptions>().on &&
              o.of<runtime::FusedQkNormRopeOptions>().on && o.of<runtime::GeluEpilogueOptions>().on);
  EXPECT_TRUE(o.of<runtime::QuantOptions>().fp8);
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().pattern, "frame_window");
  EXPECT_EQ(o.of<runtime::SparseAttentionOptions>().query_frames, 4);
  const json out = to_json(m);
  EXPECT_EQ(out["flags"]["quant"], (json{{"fp8", true}}));
  EXPECT_EQ(out["flags"]["sparse"]["query_frames"], 4);
  EXPECT_EQ(out["flags"]["gelu_epilogue"], true);
  const Manifest again = parse_manifest(out, "resolved");
  EXPECT_EQ(to_json(again), out);
  EXPECT_NE(manifest_hash(again), plain_hash);

  expect_contains(mutated_error([](json& k) { k["flags"]["quant"] = json::parse(R"({"fp4": true})"); }), "flags.quant");
  expect_contains(mutated_error([](json& k) { k["flags"]["sparse"] = json::parse(R"({"query_frames": 0})"); }),
                  "flags.sparse.query_frames");
}

// --- The technique registry as the manifest reads it (see also test_registry.cpp) ---

TEST(ManifestRegistry, ShippedManifestsKeepThePreRegistryCanonicalFlags) {
  // The registry writes the flags that predate it exactly as before and newer ones only when set, so
  // every shipped manifest's canonical form (and hash) is unchanged.
  const std::set<std::string> before = {"dtype",     "cpu_threads",    "onednn",         "attention_backend",
                                        "fused_qkv", "cross_kv_cache", "timestep_dedup", "cuda_graph",
                                        "easycache", "sparse"};
  const std::filesystem::path root = std::filesystem::path(AUTOOPTIM_SOURCE_DIR) / "manifests";
  int seen = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    const json flags = to_json(load_manifest(entry.path().string()))["flags"];
    // Besides the pre-registry flags, exactly the later flags the file itself sets.
    const json file_flags = json::parse(std::ifstream(entry.path()))["flags"];
    std::set<std::string> keys, want = before;
    for (const auto& item : flags.items()) keys.insert(item.key());
    for (const auto& item : file_flags.items()) want.insert(item.key());
    EXPECT_EQ(keys, want);
    EXPECT_EQ(flags["easycache"].size(), 4u);
    // The sparse group's later flags (query_frames, keep_ratio, key_block_rows) appear when the file sets
    // them to something other than their default.
    size_t later = 0;
    const json later_defaults = {{"query_frames", 1}, {"keep_ratio", 0.25}, {"key_block_rows", 2}};
    if (file_flags.contains("sparse"))
      for (const auto& item : later_defaults.items())
        if (file_flags["sparse"].contains(item.key()) && file_flags["sparse"][item.key()] != item.value()) ++later;
    EXPECT_EQ(flags["sparse"].size(), 5u + later);
    ++seen;
  }
  EXPECT_GE(seen, 4);
}

TEST(ManifestRegistry, UnregisteredTechniqueFlagIsRefusedByKey) {
  expect_contains(mutated_error([](json& j) {
                    j["flags"]["pisa"] = {{"enabled", true}};
                  }),
                  "manifests/x.json: flags: unknown flag 'pisa'");
  expect_contains(mutated_error([](json& j) {
                    j["flags"]["first_block_cache"] = {{"enable", true}};
                  }),
                  "manifests/x.json: flags.first_block_cache: unknown key 'enable' (did you mean 'enabled'?)");
}

}  // namespace

// A control changes precision or threads only; a patch's switches belong to the family it names (besides
// the kernel switches every family may build on); composite mixes any (issue 38's mislabelled manifests).
TEST(Manifest, SwitchesBelongToTheFamilyTheManifestNames) {
  auto refused = [](const std::function<void(json&)>& change, const std::string& why) {
    json j = valid_patch();
    change(j);
    try {
      parse_manifest(j, "x");
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused(
      [](json& j) {
        j["kind"] = "control";
        j["family"] = "none";
      },
      "a control changes precision or threads only");
  refused([](json& j) { j["family"] = "kernel"; }, "'kernel', but the flags set easycache (cache)");
  refused(
      [](json& j) {
        j["family"] = "sparse";
        j["flags"]["sparse"] = {{"pattern", "spatial_temporal"}};
      },
      "easycache (cache)");
  refused([](json& j) { j["family"] = "sparse"; }, "'sparse', but the flags set easycache (cache)");
  refused([](json& j) { j["flags"] = {{"cpu_threads", 1}}; }, "a patch turns on at least one technique");
  // Accepted: a cache patch that also turns on kernel switches, and a composite of anything.
  json with_kernel = valid_patch();
  with_kernel["flags"]["fused_qkv"] = true;
  EXPECT_NO_THROW(parse_manifest(with_kernel, "x"));
  json composite = valid_patch();
  composite["family"] = "composite";
  composite["flags"]["sparse"] = {{"pattern", "spatial_temporal"}};
  EXPECT_NO_THROW(parse_manifest(composite, "x"));
}

}  // namespace autooptim::gates
