// The binary as a user runs it: exit codes and one clear message for bad input, a clip from
// `generate`, and `run` on the tiny model writing every report, resumable from its ledger.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <unistd.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "runtime/safetensors.h"
#include "runtime/video_io.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kSrc = AUTOOPTIM_SOURCE_DIR;

using Result = autooptim::test::CliResult;
Result sh(const std::string& args) { return autooptim::test::run_cli(args); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kSmall = "--model wan22-tiny --frames 9 --steps 3 --height 64 --width 96";

// A patch of the tiny model's baseline manifest with these flags, as a file would hold it.
json tiny_patch(const std::string& id, const std::string& family, const json& flags) {
  json m = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  m["id"] = id;
  m["kind"] = "patch";
  m["family"] = family;
  m["base"] = "wan22-tiny/baseline";
  m["flags"] = flags;
  return m;
}

}  // namespace

TEST(Cli, UnknownFlagIsExitTwo) {
  const auto r = sh("generate --prompt x --out /tmp/x.mp4 --bogus");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
}

TEST(Cli, BadSizeIsExitTwoWithTheReason) {
  autooptim::test::TempDir tmp;
  const auto r = sh("generate --model wan22-tiny --frames 9 --steps 3 --height 100 --width 96 --prompt x --out " +
                    tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("multiple of 16"), std::string::npos) << r.output;
  // A multiple of 16 that the model's 16x VAE and 2x patch cannot take: the model's own multiple, named.
  const auto r32 = sh("generate --model wan22-tiny --frames 9 --steps 3 --height 112 --width 96 --prompt x --out " +
                      tmp.file("b.mp4"));
  EXPECT_NE(r32.code, 0);
  EXPECT_NE(r32.output.find("112 is not a multiple of 32 (wan22-tiny)"), std::string::npos) << r32.output;
}

TEST(Cli, MissingOrEmptyWeightsFolderIsExitTwo) {
  autooptim::test::TempDir tmp;
  auto r =
      sh("generate --model wan22-ti2v-5b --weights " + tmp.file("nope") + " --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2) << r.output;
  fs::create_directories(tmp.file("empty"));
  r = sh("generate --model wan22-ti2v-5b --weights " + tmp.file("empty") + " --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model_index.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("transformer/config.json"), std::string::npos) << r.output;
}

TEST(Cli, MalformedManifestNamesTheKey) {
  autooptim::test::TempDir tmp;
  const json m = tiny_patch("wan22-tiny/bad", "cache", {{"easycache", {{"enabled", true}, {"threshold", 1.7}}}});
  std::ofstream(tmp.file("bad.json")) << m.dump();
  const auto r = sh("gate --manifest " + tmp.file("bad.json") + " --split smoke --out " + tmp.file("g"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("flags.easycache.threshold"), std::string::npos) << r.output;
}

TEST(Cli, GenerateWritesTheClipAndStageTimes) {
  autooptim::test::TempDir tmp;
  const auto r = sh(std::string("generate ") + kSmall + " --prompt 'a red fox' --out " + tmp.file("a.mp4") +
                    " --frames-dir " + tmp.file("frames"));
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* stage : {"model load", "text encoding", "denoising", "decoding"})
    EXPECT_NE(r.output.find(stage), std::string::npos) << stage;
  const auto info = autooptim::runtime::probe_video(tmp.file("a.mp4"));
  EXPECT_EQ(info.frames, 9);
  EXPECT_EQ(info.width, 96);
  EXPECT_EQ(info.height, 64);
  EXPECT_TRUE(fs::exists(tmp.file("frames") + "/frame_0008.png"));
}

// bench --profile-detail: in each profiled region (a forward, a decode) the categories add up to the
// region, the operations fit inside it, a conv or GEMM reports its FLOP rate and an element-wise step the
// bytes it moved, and an element-wise step of the block is counted once per block and forward.
TEST(Cli, ProfileDetailAddsUpAndRatesEachOperation) {
  autooptim::test::TempDir tmp;
  const auto r = sh("bench --model wan22-tiny --steps 1 --repeat 1 --profile-detail --json " + tmp.file("b.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("GB/s"), std::string::npos) << r.output;
  const json b = json::parse(slurp(tmp.file("b.json")));
  for (const char* region : {"transformer_forward", "vae_decode_fp32"}) {
    SCOPED_TRACE(region);
    const json& p = b.at("profile").at(region);
    double cats = 0, ops = 0;
    for (const auto& [k, v] : p.at("categories").items()) cats += v.at("ms").get<double>();
    const double total = p.at("total_ms").get<double>();
    EXPECT_GT(total, 0);
    EXPECT_NEAR(cats, total, 1e-6 * total);
    ASSERT_FALSE(p.at("operations").empty());
    for (const auto& [k, v] : p.at("operations").items()) {
      ops += v.at("ms").get<double>();
      EXPECT_FALSE(v.contains("tflops") && v.contains("gbps")) << k;
      const std::string cat = k.substr(0, k.find(':'));
      if (cat == "conv" || cat == "gemm") EXPECT_TRUE(v.contains("tflops")) << k;
    }
    EXPECT_LE(ops, total * (1 + 1e-9));
  }
  const json& fwd = b["profile"]["transformer_forward"]["operations"];
  const auto model = json::parse(slurp(kSrc + "/assets/wan22-tiny/weights/transformer/config.json"));
  const double layers = model.at("num_layers").get<double>();
  for (const char* op : {"norm_elementwise: LayerNorm + modulation", "norm_elementwise: gate + residual"}) {
    ASSERT_TRUE(fwd.contains(op)) << op;
    EXPECT_GT(fwd[op].value("gbps", 0.0), 0) << op;
    EXPECT_EQ(fwd[op].at("calls").get<double>(), 2 * layers) << op;  // twice per block, one forward per region
  }
  for (const char* op : {"norm_elementwise: norm2 LayerNorm + affine", "norm_elementwise: cross residual add"}) {
    ASSERT_TRUE(fwd.contains(op)) << op;
    EXPECT_EQ(fwd[op].at("calls").get<double>(), layers) << op;
  }
}

// bench --vae-manifest: each set of VAE switches is timed against the float32 decode of the same latents,
// with its own peak, its error and the host's enqueue time (on the CPU the host does the work itself, so
// the decode's own time; on a GPU the evidence whether launches are on the critical path).
TEST(Cli, BenchTimesAVaeManifestAndItsHostEnqueue) {
  autooptim::test::TempDir tmp;
  json m = tiny_patch("wan22-tiny/test/vae-cl", "kernel", {{"vae_channels_last", true}});
  m["lossless"] = true;
  std::ofstream(tmp.file("vae.json")) << m.dump(2);
  const auto r = sh("bench --model wan22-tiny --vae-only --repeat 1 --vae-manifest " + tmp.file("vae.json") +
                    " --json " + tmp.file("b.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("vae_decode_wan22-tiny_test_vae-cl: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the host enqueued it in"), std::string::npos) << r.output;
  const json b = json::parse(slurp(tmp.file("b.json")));
  const json& v = b.at("vae_decode_switches").at("wan22-tiny_test_vae-cl");
  const double enqueue = v.at("host_enqueue_s").get<double>();
  EXPECT_GT(enqueue, 0.0);
  EXPECT_LE(enqueue, v.at("max_s").get<double>() * 1.05 + 0.01);  // a part of the decode it measured
  EXPECT_GT(v.at("psnr_vs_fp32_db").get<double>(), 60.0);         // channels-last float32: the same decode
}

// gate --object-check off --no-precision-floor: the visual check compares no object, and a lossless claim
// below the 50 dB rule is judged by the rule alone (no precision control runs); a bad value is exit 2.
TEST(Cli, GateJudgementOptionsReachTheGate) {
  autooptim::test::TempDir tmp;
  json m =
      tiny_patch("wan22-tiny/test/cache-lossless", "cache", {{"easycache", {{"enabled", true}, {"threshold", 0.1}}}});
  m["lossless"] = true;
  std::ofstream(tmp.file("m.json")) << m.dump(2);
  const std::string gate =
      "gate --model wan22-tiny --manifest " + tmp.file("m.json") + " --split smoke --max-prompts 1 --repeats 1 --json";
  const auto bad = sh(gate + " --out " + tmp.file("bad") + " --object-check maybe");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--object-check"), std::string::npos) << bad.output;
  const auto r = sh(gate + " --out " + tmp.file("g") + " --object-check off --no-precision-floor");
  ASSERT_EQ(r.code, 1) << r.output;  // rejected: a cache is not lossless
  const json v = json::parse(slurp(tmp.file("g") + "/verdict.json"));
  const json& q = v.at("gates").at("quality");
  EXPECT_FALSE(q.at("pass").get<bool>());
  EXPECT_FALSE(q.at("details").contains("precision_floor")) << q.dump();
  EXPECT_EQ(q.at("reason").get<std::string>().find("precision floor"), std::string::npos) << q.dump();
  EXPECT_FALSE(v.at("gates").at("visual").at("details").contains("objects_compared"))
      << v.at("gates").at("visual").dump();
  // With the defaults the same gate judges both.
  const auto d = sh(gate + " --out " + tmp.file("d"));
  ASSERT_EQ(d.code, 1) << d.output;
  const json dv = json::parse(slurp(tmp.file("d") + "/verdict.json"));
  EXPECT_TRUE(dv.at("gates").at("quality").at("details").contains("precision_floor"));
  EXPECT_TRUE(dv.at("gates").at("visual").at("details").contains("objects_compared"));
}

TEST(Cli, RunOnTheTinyMoeGatesItsCandidates) {
  // The A14B structure on the CPU (two experts, the Wan2.1 VAE), end to end at a reduced configuration:
  // the run starts its executors and workers, gates what they propose against the two-expert baseline
  // (guidance 4 then 3) and writes its report.
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const auto r = sh("run --model wan22-tiny-moe --synthetic-weights --out " + out +
                    " --steps 12 --frames 17 --budget-minutes 4 --budget-trials 3 --executor-trials 1 --max-prompts 1"
                    " --repeats 1");
  ASSERT_EQ(r.code, 0) << r.output;
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_EQ(rep["model"], "wan22-tiny-moe");
  EXPECT_GT(rep["baseline"]["seconds"].get<double>(), 0.0);
  ASSERT_FALSE(rep["candidates"].empty()) << r.output;
  for (const auto& c : rep["candidates"]) EXPECT_TRUE(c.contains("verdicts")) << c.dump();
  // The baseline it gated against: the model's two guidance scales at the reduced steps and frames.
  const json base = json::parse(slurp(fs::path(out) / "manifests" / "wan22-tiny-moe" / "baseline.json"));
  EXPECT_EQ(base["config"]["guidance"], 4.0);
  EXPECT_EQ(base["config"]["guidance_2"], 3.0);
  EXPECT_EQ(base["config"]["steps"], 12);
}

TEST(Cli, GenerateOnTheTinyMoe) {
  autooptim::test::TempDir tmp;
  const std::string args = "generate --model wan22-tiny-moe --synthetic-weights --frames 5 --steps 4 --prompt x";
  auto r = sh(args + " --guidance-2 2.5 --json " + tmp.file("a.json") + " --out " + tmp.file("a.mp4"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json a = json::parse(slurp(tmp.file("a.json")));
  // Another second guidance scale changes the clip (the low-noise expert's steps use it).
  r = sh(args + " --guidance-2 3.5 --json " + tmp.file("b.json") + " --out " + tmp.file("b.mp4"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json b = json::parse(slurp(tmp.file("b.json")));
  EXPECT_EQ(a["config"]["guidance_2"], 2.5);
  EXPECT_EQ(b["config"]["guidance_2"], 3.5);
  EXPECT_EQ(a["config"]["height"], 48);  // the official size
  EXPECT_NE(b["frames_sha256"], a["frames_sha256"]);
  // 80x48 is the official size (16-multiples); a model with one expert refuses --guidance-2, and the
  // image-to-video model refuses a clip without an image.
  r = sh("generate --model wan22-tiny --frames 5 --steps 2 --prompt x --guidance-2 3 --out " + tmp.file("c.mp4"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--guidance-2 is for a model with two experts; wan22-tiny has one"), std::string::npos)
      << r.output;
  r = sh("generate --model wan22-i2v-a14b --synthetic-weights --prompt x --out " + tmp.file("d.mp4"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("wan22-i2v-a14b is an image-to-video model: give the first frame with --image"),
            std::string::npos)
      << r.output;
}

TEST(Cli, RunOnTheTinyModelWritesEveryReportAndResumes) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const std::string args =
      "run --model wan22-tiny --out " + out +
      " --budget-minutes 6 --budget-trials 4 --executor-trials 2 --max-prompts 1 --repeats 1";  // one timed pair per
                                                                                                // clip: the test checks
                                                                                                // the run, not the
                                                                                                // timing
  // A failed start (prompts not found) leaves nothing behind, so the corrected command below is a
  // fresh run, not "already holds a run".
  const auto failed = sh(args + " --prompts-dir " + tmp.file("no-prompts"));
  ASSERT_EQ(failed.code, 2) << failed.output;
  EXPECT_FALSE(fs::exists(out)) << failed.output;
  const auto r = sh(args);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("report: "), std::string::npos);
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  for (const char* k : {"model", "baseline", "tiers", "candidates"}) EXPECT_TRUE(rep.contains(k)) << k;
  EXPECT_EQ(rep["model"], "wan22-tiny");
  EXPECT_GT(rep["baseline"]["seconds"].get<double>(), 0.0);
  EXPECT_EQ(rep["tiers"].size(), 4u);
  for (const char* b : {"1.5x", "2x", "3x", "4x"}) {
    ASSERT_TRUE(rep["tiers"].contains(b)) << b;
    if (!rep["tiers"][b].is_null()) {
      EXPECT_TRUE(fs::exists(fs::path(out) / "tiers" / (std::string(b) + ".json")));
      EXPECT_GE(rep["tiers"][b]["speedup"].get<double>(), std::stod(b));
    }
  }
  ASSERT_FALSE(rep["candidates"].empty());
  for (const auto& c : rep["candidates"])
    for (const char* k : {"id", "family", "speedup", "psnr", "ssim", "accepted", "verdicts"})
      EXPECT_TRUE(c.contains(k)) << k;
  const std::string junit = slurp(fs::path(out) / "junit.xml");
  EXPECT_NE(junit.find("<testsuites"), std::string::npos);
  EXPECT_NE(junit.find("name='performance'"), std::string::npos);
  const std::string html = slurp(fs::path(out) / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);  // self-contained
  EXPECT_EQ(html.find("<link"), std::string::npos);
  const std::string ledger = slurp(fs::path(out) / "ledger.jsonl");
  const auto rows = std::count(ledger.begin(), ledger.end(), '\n');
  EXPECT_GE(rows, 2);
  // Each executor lists its proposals in its own order (outbox/<family>/proposals.txt, best first), and a
  // family's first gate run is its first proposal, not the alphabetically first file.
  for (const auto& e : fs::directory_iterator(fs::path(out) / "outbox")) {
    if (!e.is_directory()) continue;
    std::set<std::string> listed, files;
    std::string first;
    {
      std::ifstream pl(e.path() / "proposals.txt");
      for (std::string l; std::getline(pl, l);) {
        if (first.empty()) first = l;
        listed.insert(l);
      }
    }
    for (const auto& f : fs::directory_iterator(e.path()))
      if (f.path().extension() == ".json") files.insert(f.path().filename().string());
    EXPECT_EQ(listed, files) << e.path();
    if (first.empty()) continue;
    const std::string family = e.path().filename().string();
    std::ifstream lin(fs::path(out) / "ledger.jsonl");
    for (std::string l; std::getline(lin, l);) {
      const json row = json::parse(l);
      const std::string id = row.value("manifest", "");
      if (id.rfind("wan22-tiny/" + family + "/", 0) != 0) continue;
      EXPECT_EQ(id, "wan22-tiny/" + family + "/" + first.substr(0, first.size() - 5)) << "first gated of " << family;
      break;
    }
  }

  // A second run into the same folder must be asked for as a resume; the resume continues (with a
  // fresh budget) and never gates a manifest again that the ledger already holds for that split.
  EXPECT_EQ(sh(args).code, 2);
  {
    // A live run holds OUT/run.lock: a --resume beside it is refused (it would gate the same candidates).
    const int fd = ::open((fs::path(out) / "run.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const auto beside = sh(args + " --resume");
    ::close(fd);
    EXPECT_EQ(beside.code, 2) << beside.output;
    EXPECT_NE(beside.output.find("is in use by another autooptim run"), std::string::npos) << beside.output;
  }
  const auto again = sh(args + " --resume");
  ASSERT_EQ(again.code, 0) << again.output;
  std::ifstream in(fs::path(out) / "ledger.jsonl");
  std::set<std::pair<std::string, std::string>> seen;
  std::string line;
  int64_t rows2 = 0;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    ++rows2;
    EXPECT_TRUE(seen.insert({row.value("manifest_hash", ""), row.value("split", "")}).second)
        << "gated twice: " << row.value("manifest", "");
  }
  EXPECT_GE(rows2, rows);
}

TEST(Cli, GenerateReproducesAManifest) {
  autooptim::test::TempDir tmp;
  json m = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  m["config"]["frames"] = 5;
  m["config"]["steps"] = 2;
  // A patch with both: one timestep per sample leaves timestep_dedup nothing to do. It runs, with a
  // warning that names both.
  m["base"] = m["id"];
  m["id"] = "wan22-tiny/kernel/idle";
  m["kind"] = "patch";
  m["family"] = "kernel";
  m["flags"]["uniform_timestep"] = true;
  m["flags"]["timestep_dedup"] = true;
  std::ofstream(tmp.file("m.json")) << m.dump();
  const auto r = sh("generate --manifest " + tmp.file("m.json") + " --prompt x --out " + tmp.file("a.mp4"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(autooptim::runtime::probe_video(tmp.file("a.mp4")).frames, 5);
  EXPECT_NE(r.output.find("timestep_dedup sits idle under uniform_timestep, which does its work"), std::string::npos)
      << r.output;
}

TEST(Cli, NumbersAndSplitsAreRefusedBeforeAnyWork) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const std::string run = "run --model wan22-tiny --out " + out + " ";
  const std::string gen = "generate --model wan22-tiny --prompt x --out " + tmp.file("a.y4m") + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {run + "--min-psnr nan", "--min-psnr"},
      {run + "--min-ssim nan", "--min-ssim"},
      {run + "--min-ssim 1.5", "--min-ssim"},
      {run + "--repeats -1", "--repeats"},
      {run + "--max-prompts -2", "--max-prompts"},
      {run + "--budget-trials -1", "--budget-trials"},
      {run + "--budget-trials 0", "--budget-trials"},
      {run + "--budget-minutes nan", "--budget-minutes"},
      {run + "--budget-minutes -1", "--budget-minutes"},
      {run + "--budget-minutes 0", "--budget-minutes"},
      {run + "--budget-minutes inf", "--budget-minutes"},
      {run + "--executor-trials -3", "--executor-trials"},
      {run + "--split heldout60", "--split"},
      {run + "--heldout-split val", "--heldout-split"},
      {run + "--frames 10", "--frames"},
      {run + "--height 100", "--height"},
      {run + "--width 16", "--width"},
      {run + "--steps 0", "--steps"},
      // Above 2^63-1: CLI11 alone clamps it to 9223372036854775807 silently.
      {run + "--budget-trials 99999999999999999999", "--budget-trials"},
      {gen + "--seed 9223372036854775808", "--seed"},
      {gen + "--seed -1", "--seed"},
      {gen + "--fps 1e308", "--fps"},
      {gen + "--fps nan", "--fps"},
      {gen + "--fps 0", "--fps"},
      {gen + "--guidance nan", "--guidance"},
      {gen + "--steps 2.5", "--steps"},
      {"gate --manifest manifests/wan22-tiny/baseline.json --split smoke --out " + out + " --min-psnr nan",
       "--min-psnr"},
      {"gate --manifest manifests/wan22-tiny/baseline.json --split smoke --out " + out + " --repeats 0", "--repeats"},
      {"bench --model wan22-tiny --repeat -1", "--repeat"},
      {"verify --golden tests/data/golden --tolerance nan", "--tolerance"},
  };
  for (const auto& [args, option] : cases) {
    const auto r = sh(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(option), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << args;
    EXPECT_FALSE(fs::exists(tmp.file("a.y4m"))) << args;
  }
}

TEST(Cli, AFailedStartLeavesNoRunBehind) {
  // Wrong --weights, wrong working directory (no manifests/prompts found): exit 2 and nothing in --out
  // that would make the corrected retry "already hold a run".
  autooptim::test::TempDir tmp;
  fs::create_directories(tmp.file("empty-weights"));
  fs::create_directories(tmp.file("existing"));
  const std::vector<std::string> starts = {
      "run --model wan22-ti2v-5b --weights " + tmp.file("empty-weights") + " --out ",
      "run --model wan22-tiny --manifests-dir " + tmp.file("nowhere") + " --out ",
      "run --model wan22-tiny --prompts-dir " + tmp.file("nowhere") + " --out ",
  };
  for (const auto& start : starts) {
    for (const std::string out : {tmp.file("fresh"), tmp.file("existing")}) {
      const auto r = sh(start + out);
      EXPECT_EQ(r.code, 2) << start << "\n" << r.output;
      if (out == tmp.file("fresh")) {
        EXPECT_FALSE(fs::exists(out)) << start;
      } else {
        EXPECT_TRUE(fs::is_empty(out)) << start;
      }
      // The retry fails for the same reason, never for "already holds a run".
      const auto again = sh(start + out);
      EXPECT_EQ(again.output.find("already holds a run"), std::string::npos) << again.output;
    }
  }
}

TEST(Cli, RunRefusesABaselineFromAFolderThatIsNotThePinnedOne) {
  // A rogue baseline.json (one CPU thread: slower, so every candidate would look faster) in the manifests
  // folder given to run: the baseline always comes from the harness, and a copy that differs is exit 2.
  autooptim::test::TempDir tmp;
  std::ifstream in(kSrc + "/manifests/wan22-tiny/baseline.json");
  nlohmann::json rogue = nlohmann::json::parse(in);
  rogue["flags"]["cpu_threads"] = 1;
  fs::create_directories(tmp.file("rogue/wan22-tiny"));
  autooptim::test::write_bytes(tmp.file("rogue/wan22-tiny/baseline.json"), rogue.dump(2));
  const auto r = sh("run --model wan22-tiny --manifests-dir " + tmp.file("rogue") + " --out " + tmp.file("out"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("differs from the harness's pinned baseline"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp.file("out")));
}

TEST(Cli, VerifyFailsAGoldenPairThatComparesNothing) {
  autooptim::test::TempDir tmp;
  const fs::path g = autooptim::test::golden_dir();
  for (const char* f : {"unipc_io.json", "unipc_io.safetensors", "transformer_tiny_weights.json",
                        "transformer_tiny_weights.safetensors"})
    fs::copy_file(g / f, tmp.path() / f);
  autooptim::runtime::write_safetensors(
      tmp.file("transformer_tiny_io.safetensors"),
      {{"hidden_states", at::zeros({1, 48, 1, 2, 2})}, {"encoder_hidden_states", at::zeros({1, 4, 40})}});
  const auto r = sh("verify --golden " + tmp.path().string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("no expected outputs"), std::string::npos) << r.output;
}

TEST(Cli, AFullDiskEndsTheRunWithTheReasonAndNoEmptyFiles) {
  autooptim::test::TempDir tmp;
  const fs::path disk = tmp.path() / "disk";
  fs::create_directories(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=256k") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{disk};
  {
    std::ofstream fill(disk / "filler", std::ios::binary);
    fill << std::string(512 << 10, 'f');  // fills the disk (the rest does not fit)
  }
  const auto r = sh("run --model wan22-tiny --out " + (disk / "run").string() + " --budget-trials 2 --max-prompts 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  // An executor on a full disk fails (exit 2) rather than leaving empty proposals or a done marker.
  json base = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  base["config"]["frames"] = 5;
  base["config"]["steps"] = 2;
  std::ofstream(tmp.file("base.json")) << base.dump();
  const auto e = sh("executor --family cache --base " + tmp.file("base.json") +
                    " --prompts prompts/visible.jsonl --outbox " + (disk / "outbox").string() + " --budget-trials 1");
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("No space left on device"), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(disk / "outbox" / "done"));
  for (const auto& f : fs::recursive_directory_iterator(disk)) {
    if (!f.is_regular_file()) continue;
    const std::string name = f.path().filename().string();
    if (name == "run.lock" || name == "trials.jsonl" || name == "ledger.jsonl") continue;
    EXPECT_GT(fs::file_size(f.path()), 0u) << f.path() << " was left empty";
  }
  EXPECT_FALSE(fs::exists(disk / "run" / "report.json"));
}

// The best-effort proposal end to end: an executor whose quality floor no trial can meet (--min-psnr 200)
// proposes exactly its closest miss as the trials it logged define it (engaged, faster than 1.0x, highest
// PSNR; the latest trial of each point), marked "best effort", with that trial's flags; or nothing when no
// trial qualifies. The cache family also brings a fixed-schedule point forward after an adaptive point
// that engaged nothing. Checked against the executor's own trials.jsonl, so the timings' noise decides
// which point wins but never whether the test passes.
TEST(Cli, ExecutorWithAnUnreachableFloorProposesItsClosestMissOnce) {
  autooptim::test::TempDir tmp;
  json base = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  base["config"]["frames"] = 5;
  base["config"]["steps"] = 8;  // past the caches' one-step warm-up
  base["config"]["height"] = 64;
  base["config"]["width"] = 96;
  std::ofstream(tmp.file("base.json")) << base.dump();
  for (const char* family : {"cache", "sparse"}) {
    SCOPED_TRACE(family);
    const fs::path box = tmp.file(std::string("outbox-") + family);
    const auto r = sh(std::string("executor --model wan22-tiny --synthetic-weights --family ") + family + " --base " +
                      tmp.file("base.json") + " --prompts prompts/visible.jsonl --outbox " + box.string() +
                      " --budget-trials 3 --min-psnr 200");
    ASSERT_EQ(r.code, 0) << r.output;
    std::vector<json> trials;
    {
      std::ifstream in(box / "trials.jsonl");
      for (std::string line; std::getline(in, line);)
        if (!line.empty()) trials.push_back(json::parse(line));
    }
    ASSERT_FALSE(trials.empty());
    // The latest trial of each point, in first-measured order; the closest miss among them.
    std::vector<std::string> labels;
    std::map<std::string, json> latest;
    for (const auto& t : trials) {
      if (!latest.count(t["label"])) labels.push_back(t["label"]);
      latest[t["label"]] = t;
    }
    const json* best = nullptr;
    for (const auto& l : labels) {
      const json& t = latest[l];
      EXPECT_LT(t["psnr_min"].get<double>(), 195.0);
      if (t["not_engaged"].empty() && t["speedup"].get<double>() > 1.0 &&
          (!best || t["psnr_min"].get<double>() > (*best)["psnr_min"].get<double>()))
        best = &t;
    }
    const std::string listed = slurp(box / "proposals.txt");
    if (!best) {
      EXPECT_EQ(listed, "");
      EXPECT_EQ(slurp(box / "done"), "0\n");
      EXPECT_NE(r.output.find("no proposal: no trial was engaged and faster than 1.0x"), std::string::npos) << r.output;
      continue;
    }
    const std::string label = (*best)["label"];
    EXPECT_EQ(listed, label + ".json\n");
    EXPECT_EQ(slurp(box / "done"), "1\n");
    const json m = json::parse(slurp(box / (label + ".json")));
    EXPECT_EQ(m["id"], std::string("wan22-tiny/") + family + "/" + label);
    EXPECT_EQ(m["family"], family);
    EXPECT_EQ(m["description"].get<std::string>().rfind("best effort: no trial met the quality floor (195 dB)", 0), 0u)
        << m["description"];
    // The trial's flags, as the proposal's (canonical: defaults added, nothing changed).
    for (const auto& [k, v] : (*best)["flags"].items()) {
      ASSERT_TRUE(m["flags"].contains(k)) << k;
      if (v.is_object())
        for (const auto& [kk, vv] : v.items()) EXPECT_EQ(m["flags"][k][kk], vv) << k << "." << kk;
      else
        EXPECT_EQ(m["flags"][k], v) << k;
    }
    if (std::string(family) == "cache")
      for (size_t i = 0; i + 1 < trials.size(); ++i) {
        const std::string l = trials[i]["label"];
        if (!trials[i]["not_engaged"].empty() && l.rfind("taylorseer", 0) != 0)
          EXPECT_EQ(trials[i + 1]["label"].get<std::string>().rfind("taylorseer", 0), 0u)
              << l << " engaged nothing, yet " << trials[i + 1]["label"] << " came next";
      }
  }
}

TEST(Cli, DeeplyNestedJsonIsExitTwoNamingFileAndKey) {
  // 1,000,000 levels deep used to overflow the stack (SIGSEGV) instead of a message and exit 2.
  autooptim::test::TempDir tmp;
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::string manifest = slurp(kSrc + "/manifests/wan22-tiny/baseline.json");
  manifest.replace(manifest.find("\"autooptim/1\""), 13, deep);
  autooptim::test::write_bytes(tmp.file("deep.json"), manifest);
  auto r = sh("gate --manifest " + tmp.file("deep.json") + " --split smoke --out " + tmp.file("g"));
  EXPECT_EQ(r.code, 2) << r.output.substr(0, 500);
  EXPECT_NE(r.output.find(tmp.file("deep.json") + ": nesting deeper than 64 levels at 'runtime'"), std::string::npos)
      << r.output.substr(0, 500);

  const fs::path g = autooptim::test::golden_dir();
  fs::create_directories(tmp.file("golden"));
  for (const char* f : {"transformer_tiny_io.safetensors", "transformer_tiny_weights.safetensors"})
    fs::copy_file(g / f, fs::path(tmp.file("golden")) / f);
  autooptim::test::write_bytes(tmp.file("golden/transformer_tiny_weights.json"),
                               "{\"config\": {\"eps\": " + deep + "}}");
  r = sh("verify --golden " + tmp.file("golden"));
  EXPECT_EQ(r.code, 2) << r.output.substr(0, 500);
  EXPECT_NE(r.output.find("transformer_tiny_weights.json: nesting deeper than 64 levels at 'config.eps'"),
            std::string::npos)
      << r.output.substr(0, 500);
}

// ---- Issue 15: logs, exit codes, interruption, works from anywhere (CI and a new user's view). ----
namespace {

// Runs the binary from `dir` with extra environment assignments ("A=1 B=2"), stdout and stderr apart.
struct Split {
  int code;
  std::string out, err;
};

Split sh_in(const std::string& dir, const std::string& env, const std::string& args) {
  autooptim::test::TempDir tmp;
  const std::string cmd = "cd " + dir + " && env " + env + " " + AUTOOPTIM_BIN + " " + args + " >" + tmp.file("out") +
                          " 2>" + tmp.file("err");
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(tmp.file("out")), slurp(tmp.file("err"))};
}

// A baseline manifest of the tiny model at a reduced size (seconds per gate run).
std::string small_baseline(const autooptim::test::TempDir& tmp) {
  json m = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  m["config"]["frames"] = 5;
  m["config"]["steps"] = 2;
  m["config"]["height"] = 64;
  m["config"]["width"] = 96;
  std::ofstream(tmp.file("small.json")) << m.dump();
  return tmp.file("small.json");
}

const char* kReduced =
    "--model wan22-tiny --frames 5 --steps 2 --height 64 --width 96 --max-prompts 1 --repeats 1 --executor-trials 1";

}  // namespace

TEST(CliUx, VersionSaysFlavourLibrariesAndCommit) {
  const auto r = sh_in(kSrc, "", "--version");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* k : {"CPU build", "commit", "libtorch", "CUDA", "cuDNN"})
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
  EXPECT_EQ(r.out.find("commit    unknown"), std::string::npos) << r.out;  // the build's git commit is embedded
}

TEST(CliUx, DeviceAutoOnACpuBuildWithTheBigModelSaysSo) {
  autooptim::test::TempDir tmp;
  const auto r =
      sh_in(kSrc, "", "generate --model wan22-ti2v-5b --synthetic-weights --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("CPU build"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("make gpu"), std::string::npos) << r.err;
}

TEST(CliUx, UnsupportedOutputExtensionFailsBeforeAnyWork) {
  autooptim::test::TempDir tmp;
  const auto r = sh_in(kSrc, "", std::string("generate ") + kSmall + " --prompt x --out " + tmp.file("x.avi"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unsupported video extension \".avi\""), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("loading"), std::string::npos) << "validated only after loading the model:\n" << r.err;
}

TEST(CliUx, HelpShowsTheDefaultsEachModelUses) {
  auto r = sh_in(kSrc, "", "run --help");
  EXPECT_NE(r.out.find("6 for wan22-tiny, 60 for wan22-ti2v-5b"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--fail-if-no-tier"), std::string::npos);
  r = sh_in(kSrc, "", "generate --help");
  EXPECT_NE(r.out.find("49 for wan22-tiny, 121 for wan22-ti2v-5b"), std::string::npos) << r.out;
}

TEST(CliUx, GenerateOffATerminalWritesShortLinesAndQuietSilencesProgress) {
  autooptim::test::TempDir tmp;
  // Off a terminal: no carriage returns or escape codes, one line per event (steps at most every N s).
  auto r = sh_in(
      kSrc, "AUTOOPTIM_TTY=0",
      "generate --model wan22-tiny --frames 9 --steps 6 --height 64 --width 96 --prompt x --out " + tmp.file("a.mp4"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\033'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("denoising done: step 6/6"), std::string::npos) << r.err;
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 6) << r.err;
  // --quiet (after the subcommand too) and AUTOOPTIM_LOG_LEVEL: nothing below a warning.
  // (A caption the trained tiny model knows: another prompt gets a warning, which --quiet keeps.)
  const std::string known = " --prompt 'a red circle quickly moves left across a striped background'";
  r = sh_in(kSrc, "AUTOOPTIM_TTY=0",
            std::string("generate ") + kSmall + " --quiet" + known + " --out " + tmp.file("b.mp4"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = sh_in(kSrc, "AUTOOPTIM_TTY=0 AUTOOPTIM_LOG_LEVEL=warn",
            std::string("generate ") + kSmall + known + " --out " + tmp.file("c.mp4"));
  EXPECT_EQ(r.err, "");
  // The flag wins over the environment.
  r = sh_in(kSrc, "AUTOOPTIM_TTY=0 AUTOOPTIM_LOG_LEVEL=warn",
            std::string("--log-level info generate ") + kSmall + " --prompt x --out " + tmp.file("d.mp4"));
  EXPECT_NE(r.err.find("denoising done"), std::string::npos) << r.err;
  // On a terminal the step line is redrawn in place.
  r = sh_in(kSrc, "AUTOOPTIM_TTY=1 NO_COLOR=1",
            std::string("generate ") + kSmall + " --prompt x --out " + tmp.file("e.mp4"));
  EXPECT_NE(r.err.find("\r\033[Kdenoising  step 1/3"), std::string::npos) << r.err;
}

TEST(CliUx, GateFromAnotherFolderReportsItsProgress) {
  autooptim::test::TempDir tmp;
  const std::string m = small_baseline(tmp);
  // From / : prompts/ and manifests/ are found from the binary, not the working directory.
  const auto r = sh_in("/", "AUTOOPTIM_TTY=0",
                       "gate --manifest " + m + " --split smoke --max-prompts 1 --repeats 1 --out " + tmp.file("g"));
  ASSERT_EQ(r.code, 1) << r.out << r.err;  // the reduced size is off the official setting
  EXPECT_NE(r.err.find("warm-up baseline  run 1/"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("off run: flags off  run "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
  // An explicit folder that is not there is named.
  const auto bad =
      sh_in("/", "", "gate --manifest " + m + " --split smoke --prompts-dir /nonexistent --out " + tmp.file("h"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("/nonexistent: no such folder"), std::string::npos) << bad.err;
}

// A reduced configuration for the gate alone (scripts/gpu/quality.sh): the pinned baseline runs at it, so
// a candidate at the same reduced size is compared clip for clip; official_config still fails.
TEST(CliUx, GateAtAReducedConfigurationRunsThePinnedBaselineThere) {
  autooptim::test::TempDir tmp;
  json m = json::parse(slurp(small_baseline(tmp)));  // 5 frames, 2 steps, 64x96
  m.update(
      {{"id", "wan22-tiny/test/kv-small"}, {"kind", "patch"}, {"family", "kernel"}, {"base", "wan22-tiny/baseline"}});
  m["flags"]["cross_kv_cache"] = true;
  std::ofstream(tmp.file("kv-small.json")) << m.dump();
  const auto r =
      sh_in(kSrc, "AUTOOPTIM_TTY=0",
            "gate --model wan22-tiny --synthetic-weights --manifest " + tmp.file("kv-small.json") +
                " --split smoke --max-prompts 1 --repeats 1 --frames 5 --steps 2 --height 64 --width 96 --full-gate "
                "--json --out " +
                tmp.file("g"));
  ASSERT_EQ(r.code, 1) << r.err;
  const json v = json::parse(r.out);
  EXPECT_EQ(v["integrity"]["baseline"]["source"], "pinned, at the harness's configuration") << v["integrity"].dump();
  EXPECT_FALSE(v["gates"]["official_config"]["pass"].get<bool>());
  EXPECT_TRUE(v["gates"]["quality"]["pass"].get<bool>()) << v["gates"]["quality"].dump();  // same-size clips, lossless
  EXPECT_TRUE(v["gates"]["off_identity"]["pass"].get<bool>()) << v["gates"]["off_identity"].dump();
  // Without the reduced configuration the same manifest meets a baseline of another size.
  const auto full = sh_in(kSrc, "AUTOOPTIM_TTY=0",
                          "gate --model wan22-tiny --synthetic-weights --manifest " + tmp.file("kv-small.json") +
                              " --split smoke --max-prompts 1 --repeats 1 --full-gate --json --out " + tmp.file("h"));
  ASSERT_EQ(full.code, 1) << full.err;
  EXPECT_FALSE(json::parse(full.out)["gates"]["quality"]["pass"].get<bool>());
  // With the shipped trained weights the gate takes wan22-tiny's own prompts, as run does: the split's clip
  // is tiny-01's, and the visual check compared its object.
  const auto trained =
      sh_in(kSrc, "AUTOOPTIM_TTY=0",
            "gate --model wan22-tiny --manifest " + tmp.file("kv-small.json") +
                " --split smoke --max-prompts 1 --repeats 1 --frames 5 --steps 2 --height 64 --width 96 --full-gate "
                "--json --out " +
                tmp.file("t"));
  ASSERT_EQ(trained.code, 1) << trained.err;
  const json tq = json::parse(slurp(tmp.file("t") + "/quality.json"));
  EXPECT_TRUE(tq["visual"].contains("tiny-01")) << tq["visual"].dump().substr(0, 300);
  EXPECT_TRUE(json::parse(trained.out)["gates"]["visual"]["details"].contains("objects_compared"));
  // A value off the grid is a parse error naming the option.
  const auto bad = sh_in(
      kSrc, "", "gate --manifest " + tmp.file("kv-small.json") + " --split smoke --frames 6 --out " + tmp.file("i"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--frames"), std::string::npos) << bad.err;
}

TEST(CliUx, RunThatGatesNothingExitsTwoWithTheReason) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  // One gate run: the baseline takes it, no candidate is gated.
  const auto r = sh_in(kSrc, "AUTOOPTIM_TTY=0",
                       std::string("run ") + kReduced + " --budget-trials 1 --budget-minutes 3 --out " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  // The kernel executor always proposes its single switches, so there are candidates, none gated.
  EXPECT_NE(r.err.find("candidates was gated"), std::string::npos) << r.err;
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_EQ(rep["outcome"]["exit_code"], 2);
  const std::string junit = slurp(fs::path(out) / "junit.xml");
  EXPECT_NE(junit.find("never gated: gate-run budget spent"), std::string::npos) << junit;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);
}

TEST(CliUx, FailIfNoTierOnAReducedRunIsExitOne) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const auto r = sh_in(
      kSrc, "AUTOOPTIM_TTY=0",
      std::string("run ") + kReduced + " --budget-trials 4 --budget-minutes 3 --out " + out + " --fail-if-no-tier");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("no tier was reached"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reduced configuration"), std::string::npos) << r.err;
}

TEST(CliUx, SigtermStopsTheExecutorsWritesTheReportAndResumeContinues) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const std::string args = std::string("run ") + kReduced + " --budget-trials 6 --budget-minutes 4 --out " + out;
  // SIGTERM while the executors explore: started in the background, signalled once their logs exist.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("AUTOOPTIM_TTY", "0", 1);
    const std::string cmd =
        "cd " + kSrc + " && exec " + AUTOOPTIM_BIN + " " + args + " >" + tmp.file("out") + " 2>" + tmp.file("err");
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(fs::path(out) / "outbox" / "kernel.log") &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(180))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string err = slurp(tmp.file("err"));
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << err;
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_EQ(rep["interrupted"]["name"], "SIGTERM");
  EXPECT_NE(slurp(fs::path(out) / "junit.xml").find("interrupted by SIGTERM"), std::string::npos);
  // No executor outlives the run, and none left an empty log.
  FILE* p = popen(("pgrep -f '[e]xecutor --family .*" + out + "'").c_str(), "r");
  char buf[256];
  std::string left;
  while (size_t n = fread(buf, 1, sizeof buf, p)) left.append(buf, n);
  pclose(p);
  EXPECT_EQ(left, "") << "executors still running: " << left;
  for (const char* fam : {"kernel", "cache", "sparse"}) {
    const fs::path log = fs::path(out) / "outbox" / (std::string(fam) + ".log");
    if (fs::exists(log)) EXPECT_GT(fs::file_size(log), 0u) << log;
  }
  // --resume picks up: it finishes, and never gates a manifest twice.
  const auto again = sh_in(kSrc, "AUTOOPTIM_TTY=0", args + " --resume");
  EXPECT_TRUE(again.code == 0 || again.code == 2) << again.err;
  const json rep2 = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_FALSE(rep2.contains("interrupted"));
  std::ifstream in(fs::path(out) / "ledger.jsonl");
  std::set<std::pair<std::string, std::string>> seen;
  std::string line;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    EXPECT_TRUE(seen.insert({row.value("manifest_hash", ""), row.value("split", "")}).second)
        << "gated twice: " << row.value("manifest", "");
  }
}

// kill -9 of the whole process group while the baseline is being gated: --resume takes the dead run's workers
// and requests for gone, measures the baseline and finishes (issue 38: it exited 2, "the baseline was not
// measured": the new worker ran the dead run's claim and the gate refused the baseline as a repeat).
TEST(CliUx, ResumeAfterKillNineDuringTheBaselineGateMeasuresTheBaseline) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const std::string args = std::string("run ") + kReduced + " --budget-trials 3 --budget-minutes 4 --out " + out;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);  // its own process group: the orchestrator, its workers and executors
    setenv("AUTOOPTIM_TTY", "0", 1);
    const std::string cmd =
        "cd " + kSrc + " && exec " + AUTOOPTIM_BIN + " " + args + " >" + tmp.file("out") + " 2>" + tmp.file("err");
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  // The baseline's gate request claimed by the worker: the run is inside the baseline gate.
  auto claimed = [&] {
    std::error_code ec;
    const fs::path dir = fs::path(out) / "workers" / "cpu0" / "claimed";
    if (!fs::is_directory(dir, ec)) return false;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind(".tmp", 0) != 0) return true;
    return false;
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (!claimed() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(180))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(claimed()) << slurp(tmp.file("err"));
  ASSERT_EQ(kill(-pid, SIGKILL), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto again = sh_in(kSrc, "AUTOOPTIM_TTY=0", args + " --resume");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.err.find("the baseline was not measured"), std::string::npos) << again.err;
  const json rep = json::parse(slurp(fs::path(out) / "report.json"));
  EXPECT_GT(rep["baseline"].value("seconds", 0.0), 0.0) << rep["baseline"].dump();
  EXPECT_TRUE(fs::exists(fs::path(out) / "workers.previous" / "cpu0" / "worker.json"));  // kept for a post-mortem
}

TEST(CliUx, TheOriginalNonDiffusersLayoutIsRecognised) {
  autooptim::test::TempDir tmp;
  fs::create_directories(tmp.file("orig"));
  for (const char* f : {"Wan2.2_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth",
                        "diffusion_pytorch_model-00001-of-00003.safetensors", "config.json"})
    std::ofstream(tmp.file("orig") + "/" + f) << "x";
  const auto r =
      sh_in(kSrc, "",
            "generate --model wan22-ti2v-5b --weights " + tmp.file("orig") + " --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("original (non-diffusers) Wan2.2 release"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Wan-AI/Wan2.2-TI2V-5B-Diffusers"), std::string::npos) << r.err;
}

#ifdef AUTOOPTIM_HAVE_VIDEOIO
#include <opencv2/imgcodecs.hpp>

TEST(CliUx, AnImageOfAnotherAspectIsCroppedAsTheReferenceAndSaysSo) {
  autooptim::test::TempDir tmp;
  cv::Mat img(64, 192, CV_8UC3, cv::Scalar(0, 0, 255));
  img.colRange(96, 192).setTo(cv::Scalar(255, 0, 0));
  ASSERT_TRUE(cv::imwrite(tmp.file("wide.png"), img));
  const auto r = sh_in(kSrc, "AUTOOPTIM_TTY=0",
                       std::string("generate ") + kSmall + " --prompt x --image " + tmp.file("wide.png") + " --out " +
                           tmp.file("a.mp4"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(
      r.err.find(
          "--image 192x64 resized to 96x64: another aspect ratio, so scaled (Lanczos) to cover it and centre-cropped"),
      std::string::npos)
      << r.err;
}
#endif

// The command line's mistakes get a suggestion, and its help is written for a reader.
TEST(Cli, MistypedCommandsAndOptionsGetADidYouMean) {
  auto r = sh("rnu --model wan22-tiny");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'rnu'; did you mean 'run'?"), std::string::npos) << r.output;
  r = sh("run --modle wan22-tiny --out /tmp/never");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("autooptim run: unknown option --modle; did you mean --model?"), std::string::npos)
      << r.output;
  r = sh("--log-level warn genrate --prompt x");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("did you mean 'generate'?"), std::string::npos) << r.output;
  r = sh("gate --manifest manifests/wan22-tiny/baseline.json --out /tmp/never --zzzzzzzz");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown option --zzzzzzzz ("), std::string::npos) << r.output;
}

TEST(Cli, BareCommandAndHelpCommandShowReadableHelp) {
  auto r = sh("");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Subcommands:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("A subcommand is required"), std::string::npos) << r.output;
  r = sh("help run");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* group : {"Model:", "Output and budget:", "Prompts and gate:", "Workers:", "Deploy check:"})
    EXPECT_NE(r.output.find(group), std::string::npos) << group << "\n" << r.output;
  // No parser internals: no mapping of names to numbers, no flag default in braces, no six-decimal ranges.
  for (const char* internal : {"->-1", "{false}", "0.000000", "OR {"})
    EXPECT_EQ(r.output.find(internal), std::string::npos) << internal << "\n" << r.output;
  EXPECT_NE(r.output.find("--object-check {auto,off,on}"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(default: auto)"), std::string::npos) << r.output;
  r = sh("help nosuch");
  EXPECT_EQ(r.code, 2) << r.output;
}
