// The deploy check of a tier that runs a plugin (orchestrator/plugin_deploy.h), with the real binary, the real
// compiler (`agent build` of the honest step_reuse plugin) and the real sandbox: the tier's `generate --plugin`
// runs in the plugin sandbox, its clip is hashed from the PNG frames it wrote and its time per clip is measured
// from outside (its speed is checked for sense, not asserted: a timing claim). The expected clips are made here the way
// a gate records them (the frames' sha256), by generate processes this test trusts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/sandbox.h"
#include "base/sha256.h"
#include "gates/gate.h"
#include "gates/manifest.h"
#include "orchestrator/plugin_deploy.h"
#include "runtime/plugin.h"
#include "test_util.h"

namespace autooptim::test {
namespace {

using nlohmann::json;

const char* kPrompt = "a red fox running through fresh snow at dawn";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// The frames' sha256 of one generate of `manifest` (with `plugin` when given), as its --json records it.
std::string clip_sha256(const TempDir& tmp, const std::string& manifest, const std::string& plugin,
                        const std::string& tag) {
  const std::string out = tmp.file(tag + "-generate.json");
  const CliResult r =
      run_cli("generate --model wan22-tiny --device cpu --manifest " + manifest + " --prompt '" + kPrompt +
              "' --seed 42 --threads 2 --quiet --json " + out + (plugin.empty() ? "" : " --plugin " + plugin));
  EXPECT_EQ(r.code, 0) << r.output;
  return read_json(out)["runs"].back().value("frames_sha256", "");
}

struct PluginTier {
  std::string plugin, sha256, manifest_file;
  gates::Manifest tier, baseline;
};

// step_reuse built by `agent build`, and a tier manifest that pins it.
PluginTier make_tier(const TempDir& tmp) {
  PluginTier t;
  t.plugin = tmp.file("step_reuse.so");
  const CliResult b = run_cli("agent build tests/agents/plugins/step_reuse.cpp --out " + t.plugin);
  EXPECT_EQ(b.code, 0) << b.output;
  runtime::load_plugin(t.plugin);  // this process parses the tier's manifest (the plugin is ours, and honest)
  t.sha256 = gates::sha256_file_hex(t.plugin);
  t.baseline = gates::pinned_baseline("wan22-tiny");
  json m = read_json(std::string(AUTOOPTIM_SOURCE_DIR) + "/manifests/wan22-tiny/baseline.json");
  m.update({{"id", "wan22-tiny/cache/step-reuse"},
            {"kind", "patch"},
            {"family", "cache"},
            {"base", m["id"]},
            {"lossless", false},
            {"plugin", t.sha256}});
  m["flags"]["step_reuse"] = {{"enabled", true}, {"interval", 5}};
  t.manifest_file = tmp.file("tier-manifest.json");
  std::ofstream(t.manifest_file) << m.dump(2);
  return t;
}

orchestrator::DeploySetup setup_in(const TempDir& tmp, const gates::Manifest& baseline) {
  orchestrator::DeploySetup s;
  s.dir = tmp.file("deploy");
  s.model_cli = {"--model", "wan22-tiny", "--device", "cpu", "--dtype", "auto"};
  s.baseline = baseline;
  s.prompt.id = "p0";
  s.prompt.text = kPrompt;
  s.seed = 42;
  s.pairs = 1;
  s.repeat = 1;
  s.threads = 2;  // as the expected clips were made (the sandbox hides /sys, where libtorch counts cores)
  s.binary = AUTOOPTIM_BIN;
  s.weights_dir = std::string(AUTOOPTIM_SOURCE_DIR) + "/assets/wan22-tiny/weights";  // as its worker registers it
  return s;
}

}  // namespace

TEST(PluginDeploy, TheTiersGenerateRunsSandboxedAndIsJudgedFromOutside) {
  if (const std::string why = base::sandbox_unavailable_reason(); !why.empty()) GTEST_SKIP() << why;
  TempDir tmp;
  const PluginTier t = make_tier(tmp);
  // The manifests as the check writes them for its processes (resolved here, every flag written out).
  const gates::Manifest tier = gates::parse_manifest(read_json(t.manifest_file), "the tier");
  std::ofstream(tmp.file("tier-resolved.json")) << gates::to_json(tier).dump(2);
  std::ofstream(tmp.file("baseline-resolved.json")) << gates::to_json(t.baseline).dump(2);
  orchestrator::DeployExpectation e;
  e.baseline_sha256 = clip_sha256(tmp, tmp.file("baseline-resolved.json"), "", "baseline");
  e.clip_sha256 = clip_sha256(tmp, tmp.file("tier-resolved.json"), t.plugin, "tier");
  ASSERT_NE(e.clip_sha256, e.baseline_sha256);  // the plugin changed the clip: a lossy step cache
  e.gated_speedup = 1.2;
  e.gate_noise = 0.3;
  const orchestrator::DeployResult r = orchestrator::plugin_deploy_check(setup_in(tmp, t.baseline), tier, t.plugin, e);
  ASSERT_TRUE(r.ran) << r.not_run << r.reason;
  EXPECT_TRUE(r.bit_exact) << r.reason;
  EXPECT_TRUE(r.baseline_bit_exact) << r.reason;
  ASSERT_EQ(r.tier_s.size(), 1u);
  ASSERT_EQ(r.baseline_s.size(), 1u);
  // Times per clip from outside, a difference of two processes' wall times: positive, and judged (the speed
  // itself is a timing claim, noisy under load: 1.7x alone here, 0.22x beside the suite; not asserted).
  EXPECT_GT(r.tier_s[0], 0.0);
  EXPECT_GT(r.baseline_s[0], 0.0);
  EXPECT_GT(r.speedup, 0.0);
  EXPECT_FALSE(r.reason.empty());
  EXPECT_NE(r.to_json().value("how", "").find("plugin sandbox"), std::string::npos);
  // Each side's clip made twice, by two processes (once, and 1 + repeat times), in folders of their own.
  for (const char* side : {"baseline-0", "tier-0"})
    for (const char* run : {"-once", "-more"})
      EXPECT_TRUE(
          std::filesystem::exists(tmp.file(std::string("deploy/") + side + run + "/workspace/frames/frame_0000.png")))
          << side << run;
  // Another clip than the gate's is not reproduced, however fast.
  orchestrator::DeployExpectation other = e;
  other.clip_sha256 = e.baseline_sha256;
  const orchestrator::DeployResult wrong =
      orchestrator::plugin_deploy_check(setup_in(tmp, t.baseline), tier, t.plugin, other);
  EXPECT_TRUE(wrong.ran);
  EXPECT_FALSE(wrong.bit_exact);
  EXPECT_FALSE(wrong.reproduced);
  EXPECT_EQ(wrong.reason, "the clip made through generate is not the gate's clip (frames differ)");
}

}  // namespace autooptim::test
