// A plugin's techniques known by their description only (gates/plugin_schema.h): the gate registers what a
// plugin's worker described and parses, validates and hashes the pinned manifests without the plugin's code;
// a technique of the description that is on is named as one this process must not run; a malformed
// description, or one that takes a built-in's name, is refused naming the problem.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "error_of.h"
#include "base/error.h"
#include "gates/manifest.h"
#include "gates/plugin_schema.h"

namespace autooptim::gates {
namespace {

using nlohmann::json;

const std::string kSha(64, 'a');

json described() {
  return json::array({{{"name", "described_step_cache"},
                       {"family", "cache"},
                       {"lossless", false},
                       {"summary", "a described technique"},
                       {"group", "described_step_cache"},
                       {"switch", "described_step_cache.enabled"},
                       {"hooks", {"pipeline.forward_replay"}},
                       {"engagement", {{{"counter", "cache.described.reused"}, {"not_engaged", "idle"}}}},
                       {"flags",
                        {{"described_step_cache.enabled", {{"type", "bool"}, {"default", false}, {"help", "on"}}},
                         {"described_step_cache.ratio",
                          {{"type", "number"},
                           {"default", 0.5},
                           {"range", {0, 1}},
                           {"range_open", {true, false}},
                           {"help", "how much"}}}}}}});
}

json pinned(const json& flags) {
  std::ifstream in(std::string(AUTOOPTIM_SOURCE_DIR) + "/manifests/wan22-tiny/baseline.json");
  json m = json::parse(in);
  m["id"] = "wan22-tiny/cache/described";
  m["kind"] = "patch";
  m["family"] = "cache";
  m["base"] = "wan22-tiny/baseline";
  m["plugin"] = kSha;
  m["flags"].update(flags);
  return m;
}

using autooptim::test::error_of;

TEST(PluginSchema, DescribedTechniquesParseValidateAndAreNeverRunHere) {
  register_plugin_schema(kSha, described());
  register_plugin_schema(kSha, described());  // the same plugin again: nothing more
  const Manifest on = parse_manifest(pinned({{"described_step_cache", {{"enabled", true}, {"ratio", 0.25}}}}), "m");
  EXPECT_EQ(to_json(on)["flags"]["described_step_cache"]["ratio"], 0.25);
  EXPECT_EQ(schema_only_technique_on(to_runtime_options(on)), "described_step_cache");
  // Defaults written or not hash the same, as for a built-in's flags.
  const Manifest a = parse_manifest(pinned({{"described_step_cache", {{"enabled", true}}}}), "m");
  const Manifest b = parse_manifest(pinned({{"described_step_cache", {{"enabled", true}, {"ratio", 0.5}}}}), "m");
  EXPECT_EQ(manifest_hash(a), manifest_hash(b));
  EXPECT_NE(manifest_hash(a), manifest_hash(on));
  EXPECT_EQ(schema_only_technique_on(runtime::RuntimeOptions{}), "");  // the baseline's: none on
  // The described range holds: 0 is outside (0, 1].
  EXPECT_NE(error_of([] {
              parse_manifest(pinned({{"described_step_cache", {{"ratio", 0}}}}), "m");
            }).find("described_step_cache.ratio"),
            std::string::npos);
}

TEST(PluginSchema, MalformedOrClashingDescriptionsAreRefused) {
  json no_switch = described();
  no_switch[0]["name"] = "described_two";
  no_switch[0].erase("switch");
  EXPECT_NE(error_of([&] { register_plugin_schema(std::string(64, 'b'), no_switch); }).find("description"),
            std::string::npos);
  json clash = described();
  clash[0]["name"] = "fused_qkv";
  clash[0]["group"] = "";
  clash[0]["switch"] = "fused_qkv";
  clash[0]["flags"] = {{"fused_qkv", {{"type", "bool"}, {"default", false}, {"help", "x"}}}};
  EXPECT_NE(error_of([&] { register_plugin_schema(std::string(64, 'c'), clash); }), "");
  json bad_type = described();
  bad_type[0]["name"] = "described_three";
  bad_type[0]["group"] = "described_three";
  bad_type[0]["switch"] = "described_three.enabled";
  bad_type[0]["flags"] = {{"described_three.enabled", {{"type", "complex"}, {"default", false}}}};
  EXPECT_NE(error_of([&] { register_plugin_schema(std::string(64, 'd'), bad_type); }).find("unknown flag type"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { register_plugin_schema(std::string(64, 'e'), json::array()); }).find("describes no technique"),
      std::string::npos);
}

}  // namespace
}  // namespace autooptim::gates
