// Gate 1 (artifacts), gate 2 (official_config) and the refusal, on evidence made in the test.
#include <gtest/gtest.h>

#include <limits>

#include "gate_evidence_fixture.h"
#include "gates/checks/artifacts.h"
#include "gates/checks/official_config.h"
#include "gates/checks/refused.h"

namespace autooptim::test {
using namespace autooptim::gates;

TEST(ArtifactsCheck, PassesWhenEveryRunWroteAValidVideo) {
  const auto ev = honest_evidence(tiny_baseline());
  const GateCheck g = check_artifacts(ev, {"", ""});
  EXPECT_EQ(g.name, "artifacts");
  EXPECT_TRUE(g.pass) << g.reason;
  EXPECT_EQ(g.reason, "every run wrote a valid video of the declared size");
  EXPECT_TRUE(g.details["problems"].empty());
}

TEST(ArtifactsCheck, FailsOnNonFinitePixelsOfATimedPair) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[1].run.video[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  const GateCheck g = check_artifacts(ev, {"", ""});
  EXPECT_FALSE(g.pass);
  EXPECT_EQ(g.reason, "pair0:p0@7: output has NaN/Inf pixels (unwritten or broken output)");
}

TEST(ArtifactsCheck, FailsOnAVideoProblemOfASplitClipOnly) {
  const auto ev = honest_evidence(tiny_baseline());
  // A timed pair's clip writes no video: a problem reported for it is not one.
  EXPECT_TRUE(check_artifacts(ev, {"", "pair problem"}).pass);
  const GateCheck g = check_artifacts(ev, {"p0: video has 2 frames of 32x32, expected 49 of 160x96", ""});
  EXPECT_FALSE(g.pass);
  EXPECT_CONTAINS(g.reason, "p0: video has 2 frames");
}

TEST(ArtifactsCheck, FailsOnAnOutputWrittenAfterTheTimedWindow) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[0].run.unwritten_at_return = true;
  ev.audit.error = "out of memory";
  const GateCheck g = check_artifacts(ev, {"", ""});
  EXPECT_FALSE(g.pass);
  EXPECT_CONTAINS(g.reason, "p0: the output was not complete when the run returned");
  ASSERT_EQ(g.details["problems"].size(), 2u);
  EXPECT_EQ(g.details["problems"][1], "audit run failed: out of memory");
}

TEST(OfficialConfigCheck, PassesOnTheOfficialSettingOnly) {
  const RunConfig official = official_config("wan22-tiny");
  const GateCheck ok = check_official_config(official, official);
  EXPECT_TRUE(ok.pass);
  EXPECT_EQ(ok.reason, "the official setting");
  RunConfig fewer = official;
  fewer.steps = 10;
  const GateCheck g = check_official_config(fewer, official);
  EXPECT_FALSE(g.pass);
  EXPECT_CONTAINS(g.reason, "config differs from the official setting");
  EXPECT_EQ(g.details["candidate"]["steps"], 10);
}

TEST(RefusedCheck, FindsOnlyARejectionInTheSameEnvironmentAndSplit) {
  const std::string hash = "0123456789abcdef0123";
  const nlohmann::json rejected = {
      {"manifest_hash", hash},        {"split", "smoke"},    {"accepted", false}, {"refused", false},
      {"failure_signature", "no-op"}, {"manifest", "tiny/x"}};
  auto always = [](const nlohmann::json&) { return true; };
  auto never = [](const nlohmann::json&) { return false; };
  EXPECT_TRUE(find_rejection({rejected}, hash, "smoke", always));
  EXPECT_FALSE(find_rejection({rejected}, hash, "smoke", never));
  EXPECT_FALSE(find_rejection({rejected}, hash, "dev", always));
  EXPECT_FALSE(find_rejection({rejected}, "other", "smoke", always));
  nlohmann::json accepted = rejected;
  accepted["accepted"] = true;
  EXPECT_FALSE(find_rejection({accepted}, hash, "smoke", always));
  nlohmann::json refusal = rejected;
  refusal["refused"] = true;
  EXPECT_FALSE(find_rejection({refusal}, hash, "smoke", always));

  const GateCheck g = check_refused(rejected, hash);
  EXPECT_EQ(g.name, "refused");
  EXPECT_FALSE(g.pass);
  EXPECT_EQ(g.reason,
            "manifest 0123456789ab was already rejected on this build (no-op, as 'tiny/x'); a retry that "
            "changes only cosmetics is refused");
}

}  // namespace autooptim::test
