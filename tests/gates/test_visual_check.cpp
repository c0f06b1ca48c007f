// Gate 6 (visual), on evidence made in the test.
#include <gtest/gtest.h>

#include "gate_evidence_fixture.h"
#include "gates/checks/visual.h"

namespace autooptim::test {
using namespace autooptim::gates;

TEST(VisualCheck, PassesClipsWithTheBaselinesLook) {
  const auto ev = honest_evidence(tiny_baseline());
  const VisualResult v = check_visual(ev, false);
  EXPECT_EQ(v.check.name, "visual");
  EXPECT_TRUE(v.check.pass) << v.check.reason;
  EXPECT_EQ(v.check.reason, "no artifact beyond the baseline's");
  EXPECT_TRUE(v.clips.contains("p0"));
  EXPECT_FALSE(v.check.details.contains("semantics_lost"));
  EXPECT_TRUE(check_visual(ev, true).check.details.contains("semantics_lost"));
}

TEST(VisualCheck, FailsOnBlackFramesTheBaselineDoesNotHave) {
  auto ev = honest_evidence(tiny_baseline());
  const auto black = noise_frames(4, 0, 2);
  ev.clips[0] = clip_of("p0", false, honest_run(tiny_baseline(), black, 1.0), noise_frames(1));
  const VisualResult v = check_visual(ev, false);
  EXPECT_FALSE(v.check.pass);
  EXPECT_CONTAINS(v.check.reason, "p0: black frames: 3");
  EXPECT_FALSE(v.check.details["new_artifacts"].empty());
}

}  // namespace autooptim::test
