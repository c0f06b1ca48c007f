#include "gates/checks/off_identity.h"

#include <algorithm>
#include <cmath>

#include "base/strings.h"
#include "gates/clip_frames.h"
#include "gates/metrics.h"
#include "runtime/video_io.h"

namespace autooptim::gates {

using base::format_fixed;

GateCheck check_off_identity(const GateEvidence& ev, const GateSettings& S) {
  GateCheck g{"off_identity", true, "", nlohmann::json::object()};
  if (!ev.off_not_run.empty()) {
    g.reason = ev.off_not_run;
    g.details = {{"run", false}};
    return g;
  }
  const RunOutput& off_run = ev.off_run;
  const auto off8 = runtime::frames_from_tensor(off_run.video);
  const auto& ref8 = ev.clips.at(0).base8;  // the fresh baseline run at the first prompt's official seed
  double psnr_off = kPsnrCap;
  const bool same = off_run.error.empty() && finite_video(off_run.video) && same_frames(off8, ref8);
  // Another configuration (a lower resolution) cannot be compared: official_config rejects it, and the off
  // run differs from the baseline's by its size, not by a crash of the comparison (issue 38).
  const bool comparable = same_shape(off8, ref8);
  if (!same && off_run.error.empty() && comparable) psnr_off = compare_clips(off8, ref8).psnr_min;
  if (!comparable) psnr_off = 0;
  const double base_median = ev.timing.baseline.median;
  const double ratio = base_median > 0 ? off_run.seconds / base_median : 0.0;
  const double tol = std::max(2 * ev.timing.noise, S.off_time_tolerance);
  g.details = {{"bit_identical", same}, {"psnr_min", psnr_off},  {"off_seconds", off_run.seconds},
               {"time_ratio", ratio},   {"time_tolerance", tol}, {"off_manifest", ev.off_manifest}};
  if (!off_run.error.empty()) {
    g.pass = false;
    g.reason = "the off run failed: " + off_run.error;
  } else if (!same && (S.exact_off_identity || psnr_off < S.lossless_psnr)) {
    g.pass = false;
    g.reason = "with the technique's flags off the output differs from the baseline's (PSNR " +
               format_fixed(psnr_off, 2) + " dB)";
  } else if (std::fabs(ratio - 1.0) > tol) {
    g.pass = false;
    g.reason = "with the flags off the time is " + format_fixed(ratio, 3) + "x the baseline's (tolerance " +
               format_fixed(tol, 3) + ")";
  } else {
    g.reason = same ? "flags off: bit-identical output, same time" : "flags off: output within tolerance, same time";
  }
  return g;
}

}  // namespace autooptim::gates
