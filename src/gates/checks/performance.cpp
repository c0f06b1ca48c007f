#include "gates/checks/performance.h"

#include <algorithm>

#include "base/strings.h"
#include "gates/clip_frames.h"
#include "runtime/video_io.h"

namespace autooptim::gates {

using base::format_fixed;

GateCheck check_performance(const GateEvidence& ev) {
  GateCheck g{"performance", true, "", nlohmann::json::object()};
  const GateTiming& t = ev.timing;
  const GateClip& first_pair = ev.first_pair();
  const double forwards = first_pair.run.trace.get("transformer.forwards");
  const double peak = std::max(ev.peak_tflops, ev.calibration.matmul_tflops);
  // The floor counts only the GEMMs of the forwards that really ran: attention may be sparse.
  const double floor_s = forwards * ev.work.candidate_linear / (peak * 1e12);
  g.details = {{"baseline", t.baseline.to_json()},
               {"candidate", t.candidate.to_json()},
               {"noise", t.noise},
               {"margin", t.margin},
               {"speedup", t.speedup},
               {"floor_s", floor_s},
               {"peak_tflops", peak},
               {"forwards", forwards},
               {"audit_s", ev.audit.seconds},
               {"runs", t.timed_stages}};
  const double first = first_pair.run.seconds;
  const double audit_drop = first > 0 ? 1.0 - ev.audit.seconds / first : 0.0;
  if (t.speedup < 1.0 + t.margin) {
    g.pass = false;
    g.reason = "not faster than the baseline beyond the noise: " + format_fixed(t.speedup, 3) + "x, needs > " +
               format_fixed(1.0 + t.margin, 3) + "x";
  } else if (t.candidate.min < floor_s) {
    g.pass = false;
    g.reason = "a run took " + format_fixed(t.candidate.min, 3) + " s, below the physical floor of " +
               format_fixed(floor_s, 3) + " s";
  } else if (audit_drop > std::max(3 * t.margin, 0.25)) {
    g.pass = false;
    g.reason = "duplicate-prompt audit: the same prompt cost " + format_fixed(first, 3) + " s then " +
               format_fixed(ev.audit.seconds, 3) + " s (caching across requests)";
  } else if (!same_frames(runtime::frames_from_tensor(ev.audit.video), first_pair.cand8)) {
    g.pass = false;
    g.reason = "duplicate-prompt audit: the same prompt gave a different clip the second time";
  } else {
    g.reason = format_fixed(t.speedup, 3) + "x faster (noise " + format_fixed(t.noise, 3) + ")";
  }
  return g;
}

}  // namespace autooptim::gates
