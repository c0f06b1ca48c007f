// Gate 3 (performance) and gate 4 (off_identity), on evidence made in the test.
#include <gtest/gtest.h>

#include "gate_evidence_fixture.h"
#include "gates/checks/off_identity.h"
#include "gates/checks/performance.h"

namespace autooptim::test {
using namespace autooptim::gates;

TEST(PerformanceCheck, PassesWhenFasterBeyondTheNoise) {
  const auto ev = honest_evidence(tiny_baseline());
  const GateCheck g = check_performance(ev);
  EXPECT_EQ(g.name, "performance");
  EXPECT_TRUE(g.pass) << g.reason;
  EXPECT_EQ(g.reason, "2.000x faster (noise 0.020)");
  EXPECT_EQ(g.details["forwards"], 100.0);
}

TEST(PerformanceCheck, FailsWhenNotFasterThanTheMargin) {
  auto ev = honest_evidence(tiny_baseline());
  ev.timing.speedup = 1.02;
  const GateCheck g = check_performance(ev);
  EXPECT_FALSE(g.pass);
  EXPECT_EQ(g.reason, "not faster than the baseline beyond the noise: 1.020x, needs > 1.030x");
}

TEST(PerformanceCheck, FailsBelowThePhysicalFloor) {
  auto ev = honest_evidence(tiny_baseline());
  ev.work.candidate_linear = 1e12;  // 100 forwards of 1 TFLOP each at 1 TFLOP/s: 100 s at least
  const GateCheck g = check_performance(ev);
  EXPECT_FALSE(g.pass);
  EXPECT_CONTAINS(g.reason, "below the physical floor of 100.000 s");
}

TEST(PerformanceCheck, FailsWhenTheDuplicatePromptIsCheaperOrDifferent) {
  auto ev = honest_evidence(tiny_baseline());
  ev.audit.seconds = 0.5;
  GateCheck g = check_performance(ev);
  EXPECT_FALSE(g.pass);
  EXPECT_EQ(g.reason, "duplicate-prompt audit: the same prompt cost 1.000 s then 0.500 s (caching across requests)");
  ev = honest_evidence(tiny_baseline());
  ev.audit.video = video_of(noise_frames(2));
  g = check_performance(ev);
  EXPECT_FALSE(g.pass);
  EXPECT_EQ(g.reason, "duplicate-prompt audit: the same prompt gave a different clip the second time");
}

TEST(OffIdentityCheck, PassesWhenFlagsOffReproduceTheBaseline) {
  const auto ev = honest_evidence(tiny_baseline());
  const GateCheck g = check_off_identity(ev, GateSettings{});
  EXPECT_EQ(g.name, "off_identity");
  EXPECT_TRUE(g.pass) << g.reason;
  EXPECT_EQ(g.reason, "flags off: bit-identical output, same time");
  EXPECT_TRUE(g.details["bit_identical"].get<bool>());
}

TEST(OffIdentityCheck, FailsOnAnotherOutputOrAnotherTime) {
  auto ev = honest_evidence(tiny_baseline());
  ev.off_run.video = video_of(noise_frames(3));
  GateCheck g = check_off_identity(ev, GateSettings{});
  EXPECT_FALSE(g.pass);
  EXPECT_CONTAINS(g.reason, "with the technique's flags off the output differs from the baseline's (PSNR ");
  ev = honest_evidence(tiny_baseline());
  ev.off_run.seconds = 3.0;
  g = check_off_identity(ev, GateSettings{});
  EXPECT_FALSE(g.pass);
  EXPECT_EQ(g.reason, "with the flags off the time is 1.500x the baseline's (tolerance 0.150)");
  ev.off_run.error = "boom";
  EXPECT_EQ(check_off_identity(ev, GateSettings{}).reason, "the off run failed: boom");
}

}  // namespace autooptim::test
