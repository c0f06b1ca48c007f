#include "gates/checks/visual.h"

#include "gates/clip_frames.h"
#include "gates/detectors.h"
#include "runtime/video_io.h"

namespace autooptim::gates {

VisualResult check_visual(const GateEvidence& ev, bool objects) {
  VisualResult result;
  GateCheck& g = result.check;
  g = {"visual", true, "", nlohmann::json::object()};
  std::vector<std::string> found, lost;
  int64_t compared = 0;  // clips whose baseline shows a single object
  for (const auto& c : ev.clips) {
    if (c.cand8.size() != c.base8.size()) continue;  // the quality gate says why
    const auto cr = visual_report(runtime::float_frames_from_tensor(c.run.video));
    const auto br = visual_report(c.base8);
    result.clips[c.name] = {{"candidate", gates::to_json(cr)}, {"baseline", gates::to_json(br)}};
    for (const auto& reason : new_artifacts(cr, br)) found.push_back(c.name + ": " + reason);
    if (objects && !c.cand8.empty() && same_shape(c.cand8, c.base8)) {
      const auto ct = detect_object_track(c.cand8), bt = detect_object_track(c.base8);
      result.clips[c.name]["object"] = {{"candidate", gates::to_json(ct)}, {"baseline", gates::to_json(bt)}};
      compared += single_object(bt);
      for (const auto& reason : lost_semantics(ct, bt)) lost.push_back(c.name + ": " + reason);
    }
  }
  g.pass = found.empty() && lost.empty();
  g.reason =
      g.pass
          ? (compared > 0 ? "no artifact beyond the baseline's; the object keeps the baseline's colour and motion in " +
                                std::to_string(compared) + " of " + std::to_string(ev.clips.size()) + " clips"
                          : "no artifact beyond the baseline's")
          : (found.empty() ? lost : found).front();
  g.details["new_artifacts"] = found;
  if (objects) {
    g.details["semantics_lost"] = lost;
    g.details["objects_compared"] = compared;  // 0 where the baseline shows no single object (random weights)
  }
  return result;
}

}  // namespace autooptim::gates
