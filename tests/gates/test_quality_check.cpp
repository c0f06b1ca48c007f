// Gate 5 (quality) and its precision floor, on evidence made in the test.
#include <gtest/gtest.h>

#include "gate_evidence_fixture.h"
#include "gates/checks/quality.h"

namespace autooptim::test {
using namespace autooptim::gates;

namespace {

// The quality check as the gate runs it, with the controls of the clips it asks for.
QualityResult judge(const GateEvidence& ev, bool lossless, const GateSettings& S,
                    const std::vector<PrecisionControlClip>& controls = {}) {
  const QualityComparisons cmp = compare_quality(ev, lossless, S);
  return check_quality(ev, cmp, lossless, S, controls);
}

// The frames one 8-bit level up on the pixels where (x + y) % 2 == parity: two such clips of one source are
// the same distance from it (as two roundings of one exact result are) and one level from each other.
std::vector<cv::Mat> rounded(const std::vector<cv::Mat>& src, int parity) {
  auto out = copy_frames(src);
  for (auto& f : out)
    for (int y = 0; y < f.rows; ++y)
      for (int x = 0; x < f.cols; ++x)
        if ((x + y) % 2 == parity) f.at<cv::Vec3b>(y, x) += cv::Vec3b(1, 1, 1);
  return out;
}

// A lossless candidate one level from the baseline on every pixel of its split clip, both as far from the
// exact source (the control) as each other.
GateEvidence one_level_off(std::vector<cv::Mat>& exact) {
  GateEvidence ev = honest_evidence(tiny_baseline());
  exact = noise_frames(5);
  ev.clips[0] = clip_of("p0", false, honest_run(tiny_baseline(), rounded(exact, 1), 1.0), rounded(exact, 0));
  return ev;
}

}  // namespace

TEST(QualityCheck, PassesALosslessCandidateIdenticalToTheBaseline) {
  const auto ev = honest_evidence(tiny_baseline());
  const QualityResult q = judge(ev, true, GateSettings{});
  EXPECT_EQ(q.check.name, "quality");
  EXPECT_TRUE(q.check.pass) << q.check.reason;
  EXPECT_EQ(q.check.reason, "worst PSNR 100.00 dB, worst SSIM 1.0000");
  EXPECT_EQ(q.worst_psnr, 100.0);
  EXPECT_TRUE(q.clips["p0"]["bit_identical"].get<bool>());
  EXPECT_TRUE(q.clips["pair0:p0@7"]["audit"].get<bool>());
}

TEST(QualityCheck, FailsALossyCandidateBelowTolerance) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[0] = clip_of("p0", false, honest_run(tiny_baseline(), noise_frames(9), 1.0), noise_frames(1));
  const QualityResult q = judge(ev, false, GateSettings{});
  EXPECT_FALSE(q.check.pass);
  EXPECT_CONTAINS(q.check.reason, "quality below tolerance: worst PSNR ");
  EXPECT_CONTAINS(q.check.reason, "(needs 30.00)");
  EXPECT_LT(q.worst_psnr, 30.0);
}

TEST(QualityCheck, FailsAnUnannouncedAuditBelowItsTolerance) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[1] = clip_of("pair0:p0@7", true, honest_run(tiny_baseline(), noise_frames(9), 1.0), noise_frames(1));
  const QualityResult q = judge(ev, false, GateSettings{});
  EXPECT_FALSE(q.check.pass);
  EXPECT_CONTAINS(q.check.reason, "unannounced audit pair0:p0@7: PSNR ");
  EXPECT_CONTAINS(q.check.reason, "(needs 27.00)");
}

TEST(QualityCheck, FailsAClipOfAnotherSize) {
  auto ev = honest_evidence(tiny_baseline());
  ev.clips[0].base8.pop_back();
  const QualityResult q = judge(ev, false, GateSettings{});
  EXPECT_FALSE(q.check.pass);
  EXPECT_EQ(q.check.reason, "p0: the clip's size differs from the baseline's (another config)");
  EXPECT_FALSE(q.clips["p0"]["comparable"].get<bool>());
}

TEST(QualityCheck, PassesALosslessClaimWithinThePrecisionFloor) {
  std::vector<cv::Mat> exact;
  const auto ev = one_level_off(exact);
  const QualityComparisons cmp = compare_quality(ev, true, GateSettings{});
  ASSERT_EQ(cmp.need_precision_control, std::vector<size_t>{0});
  const QualityResult q = check_quality(ev, cmp, true, GateSettings{}, {{copy_frames(exact), ""}});
  EXPECT_TRUE(q.check.pass) << q.check.reason;
  EXPECT_CONTAINS(q.check.reason, "fp64 control as the baseline's");
  EXPECT_CONTAINS(q.check.reason, "lossless within the baseline's rounding");
  EXPECT_TRUE(q.check.details["precision_floor"]["pass"].get<bool>());
  // Without the floor the 50 dB rule alone decides.
  GateSettings off;
  off.precision_floor = false;
  const QualityResult strict = judge(ev, true, off);
  EXPECT_FALSE(strict.check.pass);
  EXPECT_CONTAINS(strict.check.reason, "(needs 50.00)");
}

TEST(QualityCheck, FailsALosslessClaimFartherFromTheControlThanTheBaseline) {
  std::vector<cv::Mat> exact;
  const auto ev = one_level_off(exact);
  // The control is the baseline's own clip: the candidate is one level from it, the baseline none.
  const QualityResult q = judge(ev, true, GateSettings{}, {{copy_frames(ev.clips[0].base8), ""}});
  EXPECT_FALSE(q.check.pass);
  EXPECT_CONTAINS(q.check.reason, "nor within the precision floor: p0: ");
  EXPECT_CONTAINS(q.check.reason, "from the fp64 control");
}

TEST(QualityCheck, FailsALosslessClaimWhoseControlFailed) {
  std::vector<cv::Mat> exact;
  const auto ev = one_level_off(exact);
  const QualityResult q = judge(ev, true, GateSettings{}, {{{}, "boom"}});
  EXPECT_FALSE(q.check.pass);
  EXPECT_CONTAINS(q.check.reason, "nor within the precision floor: the precision control (fp64) of p0 failed: boom");
}

}  // namespace autooptim::test
