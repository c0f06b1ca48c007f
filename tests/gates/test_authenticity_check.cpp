// The authenticity check (replayed output, seen against fresh prompts, untimed work, counters against the
// measured work, work floors, stage times, steps, engagement), on evidence made in the test.
#include <gtest/gtest.h>

#include "gate_evidence_fixture.h"
#include "gates/checks/authenticity.h"

namespace autooptim::test {
using namespace autooptim::gates;

namespace {

AuthenticityResult judge(const GateEvidence& ev, const UntimedWork& untimed = {}) {
  return check_authenticity(ev, tiny_baseline(), untimed, GateSettings{});
}

// The tiny baseline with `flags` on, a patch of `family`.
Manifest with_flags(const nlohmann::json& flags, const std::string& family) {
  nlohmann::json j = to_json(tiny_baseline());
  j.update({{"id", "wan22-tiny/test/" + family},
            {"kind", "patch"},
            {"family", family},
            {"base", j["id"]},
            {"flags", flags},
            {"lossless", family != "cache"}});
  return parse_manifest(j, "test " + family);
}

}  // namespace

TEST(AuthenticityCheck, PassesAnHonestRunWithoutTechniques) {
  const auto ev = honest_evidence(tiny_baseline());
  const AuthenticityResult a = judge(ev);
  EXPECT_EQ(a.check.name, "authenticity");
  EXPECT_TRUE(a.check.pass) << a.check.reason;
  EXPECT_EQ(a.check.reason, "no technique flags (baseline or control)");
  EXPECT_EQ(a.check.details["work"].size(), 2u);
  EXPECT_EQ(a.seen_vs_fresh["fresh_s"], 1.0);
  EXPECT_FALSE(a.seen_vs_fresh.contains("recheck"));
}

TEST(AuthenticityCheck, FailsSkippedWorkWithTheBaselinesExactClip) {
  auto ev = honest_evidence(tiny_baseline());
  // Steps 1-19 skipped, honestly counted: 62 of 100 forwards ran, the clip is still the baseline's.
  auto& run = ev.clips[0].run;
  for (size_t s = 1; s < 20; ++s) {
    run.times.step_forwards[s] = 0;
    run.times.step_blocks[s] = 0;
  }
  run.trace = runtime::Trace();
  run.trace.add("transformer.forwards", 62);
  run.trace.add("cache.skipped_forwards", 38);
  run.times.denoising = 0.3;
  const AuthenticityResult a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_CONTAINS(a.check.reason, "p0: claims to have skipped work (62 of 100 forwards run");
  EXPECT_CONTAINS(a.check.reason, "yet its clip is bit-identical to the baseline's");
}

TEST(AuthenticityCheck, FailsACandidateFasterOnPromptsWithABaselineOutput) {
  auto ev = honest_evidence(tiny_baseline());
  ev.timing.candidate_split_s = {0.2};
  AuthenticityResult a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason,
            "the candidate is faster on prompts/seeds whose baseline output already exists (0.200 s at the official "
            "seed) than on fresh ones drawn inside the timed window (1.000 s): it depends on the baseline's outputs");
  // An adjacent recheck that agrees clears a load spike.
  ev.timing.recheck_s = std::make_pair(1.0, 0.95);
  a = judge(ev);
  EXPECT_TRUE(a.check.pass) << a.check.reason;
  EXPECT_EQ(a.seen_vs_fresh["recheck"]["seen_s"], 0.95);
}

TEST(AuthenticityCheck, FailsOnUntimedWork) {
  const auto ev = honest_evidence(tiny_baseline());
  UntimedWork untimed;
  untimed.problems.push_back("untimed work: 3.000 s of CPU time outside the candidate's timed runs");
  const AuthenticityResult a = judge(ev, untimed);
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason, untimed.problems[0]);
}

TEST(AuthenticityCheck, FailsCountersThatClaimOtherWorkThanTheLoopRan) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[1].run.trace.add("transformer.forwards", 10);  // claims 110
  AuthenticityResult a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason, "pair0:p0@7: the trace claims 110 transformer forwards, the denoising loop ran 100");
  ev = honest_evidence(tiny_baseline());
  ev.clips[0].run.times.text_tokens = 0;  // the prompt was encoded outside the run
  a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_CONTAINS(a.check.reason,
                  "p0: the text encoder ran 0 token rows and text_trim claims 0 saved, where the prompts have 16");
  ev = honest_evidence(tiny_baseline());
  ev.clips[0].run.trace.add("kernel.cuda_graph.replays", 3);
  a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_CONTAINS(a.check.reason, "p0: claims 3 CUDA-graph replays on a CPU device");
}

TEST(AuthenticityCheck, FailsWorkBelowTheFloors) {
  auto ev = honest_evidence(tiny_baseline());
  // A lossy clip (not the baseline's: no replay) whose first step ran one block of four.
  ev.clips[0].base8 = noise_frames(2);
  ev.clips[0].identical = false;
  ev.clips[0].run.times.step_blocks[0] = 1;
  AuthenticityResult a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason, "p0: the first step ran 2 of 2 forwards and 1 of 4 blocks");
  ev = honest_evidence(tiny_baseline());
  ev.clips[0].run.times.step_forwards.clear();
  a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_CONTAINS(a.check.details["problems"].dump(), "p0: no denoising loop ran (the clip came from elsewhere)");
}

TEST(AuthenticityCheck, FailsAStageFasterThanAnyTechniqueMakesIt) {
  auto ev = honest_evidence(tiny_baseline());
  ev.timing.candidate_decode_s = 0.01;
  const AuthenticityResult a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason,
            "VAE decoding took 0.0100 s against the baseline's 0.2000 s, and no technique works on it: "
            "done before the timer?");
}

TEST(AuthenticityCheck, FailsALoopThatRanFewerSteps) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[1].run.times.step_seconds.pop_back();
  const AuthenticityResult a = judge(ev);
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason, "pair0:p0@7: the denoising loop ran 49 of the manifest's 50 steps");
}

// A cache makes no block cheaper: at the share of blocks its counts say ran, its speedup is bounded by the
// baseline's time over its time outside the loop plus its denoising at that share. Every block "run" at 2x is the
// forged count of a plugin that skipped work and reported none of it skipped.
TEST(AuthenticityCheck, FailsACacheFasterThanTheBlocksItCountsAllow) {
  const Manifest cache = with_flags({{"easycache", {{"enabled", true}}}}, "cache");
  auto ev = honest_evidence(cache);  // every block counted, 1.0 s against the baseline's 2.0 (1.7 denoising)
  AuthenticityResult a = check_authenticity(ev, cache, {}, GateSettings{});
  EXPECT_FALSE(a.check.pass);
  EXPECT_EQ(a.check.reason,
            "its timed pairs ran 2.00x faster than the baseline, where a cache (which makes no block cheaper) that "
            "runs the 100.0% of the baseline's blocks its counts claim reaches at most 1.00x (the baseline's 0.300 s "
            "outside the denoising loop, 1.700 s in it), 1.50x with the slack for noise: the counts claim work that "
            "was not done");
  EXPECT_EQ(a.check.details["cache_cost"]["bound"], 1.0);
  EXPECT_EQ(a.check.details["cache_cost"]["allowed"], 1.5);
  // Honest counts: the pair's clip ran 40% of the blocks (2.0 / (0.3 + 0.4 x 1.7) = 2.04x at most, 2.0 measured).
  for (auto& c : ev.clips)
    for (size_t s = 1; s < c.run.times.step_blocks.size(); ++s)
      if (s % 5 > 1) c.run.times.step_blocks[s] = 0;
  a = check_authenticity(ev, cache, {}, GateSettings{});
  EXPECT_EQ(a.check.details["problems"].dump().find("a cache makes no block cheaper"), std::string::npos)
      << a.check.details["problems"].dump();
  // A kernel makes blocks cheaper: the same counts and times are no problem there.
  const Manifest kernel = with_flags({{"cross_kv_cache", true}}, "kernel");
  a = check_authenticity(honest_evidence(kernel), kernel, {}, GateSettings{});
  EXPECT_EQ(a.check.details["problems"].dump().find("a cache makes no block cheaper"), std::string::npos)
      << a.check.details["problems"].dump();
  EXPECT_NE(a.check.details["problems"].dump().find("cross_kv_cache is on but"), std::string::npos)
      << "the evidence was judged: " << a.check.details["problems"].dump();
}

}  // namespace autooptim::test
