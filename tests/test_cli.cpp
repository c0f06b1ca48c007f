// The binary as a user runs it: exit codes and one clear message for bad input, a clip from
// `generate`, and `run` on the tiny model writing every report, resumable from its ledger.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "runtime/video_io.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kSrc = AUTOOPTIM_SOURCE_DIR;

struct Result {
  int code;
  std::string output;  // stdout and stderr
};

Result sh(const std::string& args) {
  const std::string cmd = "cd " + kSrc + " && " + AUTOOPTIM_BIN + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* kSmall = "--model wan22-tiny --frames 9 --steps 3 --height 64 --width 96";

}  // namespace

TEST(Cli, UnknownFlagIsExitTwo) {
  const auto r = sh("generate --prompt x --out /tmp/x.mp4 --bogus");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
}

TEST(Cli, BadSizeIsExitTwoWithTheReason) {
  autooptim::test::TempDir tmp;
  const auto r = sh("generate --model wan22-tiny --frames 9 --steps 3 --height 100 --width 96 --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("multiple of 32"), std::string::npos) << r.output;
}

TEST(Cli, MissingOrEmptyWeightsFolderIsExitTwo) {
  autooptim::test::TempDir tmp;
  auto r = sh("generate --model wan22-ti2v-5b --weights " + tmp.file("nope") + " --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2) << r.output;
  fs::create_directories(tmp.file("empty"));
  r = sh("generate --model wan22-ti2v-5b --weights " + tmp.file("empty") + " --prompt x --out " + tmp.file("a.mp4"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model_index.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("transformer/config.json"), std::string::npos) << r.output;
}

TEST(Cli, MalformedManifestNamesTheKey) {
  autooptim::test::TempDir tmp;
  json m = json::parse(slurp(kSrc + "/manifests/wan22-tiny/baseline.json"));
  m["kind"] = "patch";
  m["family"] = "cache";
  m["base"] = "wan22-tiny/baseline";
  m["id"] = "wan22-tiny/bad";
  m["flags"] = {{"easycache", {{"enabled", true}, {"threshold", 1.7}}}};
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
  for (const char* stage : {"model load", "text encoding", "denoising", "decoding"}) EXPECT_NE(r.output.find(stage), std::string::npos) << stage;
  const auto info = autooptim::runtime::probe_video(tmp.file("a.mp4"));
  EXPECT_EQ(info.frames, 9);
  EXPECT_EQ(info.width, 96);
  EXPECT_EQ(info.height, 64);
  EXPECT_TRUE(fs::exists(tmp.file("frames") + "/frame_0008.png"));
}

TEST(Cli, RunOnTheTinyModelWritesEveryReportAndResumes) {
  autooptim::test::TempDir tmp;
  const std::string out = tmp.file("run");
  const std::string args = "run --model wan22-tiny --out " + out + " --budget-minutes 3 --budget-trials 4 --executor-trials 2 --max-prompts 1";
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
    for (const char* k : {"id", "family", "speedup", "psnr", "ssim", "accepted", "verdicts"}) EXPECT_TRUE(c.contains(k)) << k;
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

  // A second run into the same folder must be asked for as a resume; the resume continues (with a
  // fresh budget) and never gates a manifest again that the ledger already holds for that split.
  EXPECT_EQ(sh(args).code, 2);
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
  std::ofstream(tmp.file("m.json")) << m.dump();
  const auto r = sh("generate --manifest " + tmp.file("m.json") + " --prompt x --out " + tmp.file("a.mp4"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(autooptim::runtime::probe_video(tmp.file("a.mp4")).frames, 5);
}
