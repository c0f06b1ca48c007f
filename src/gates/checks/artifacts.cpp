#include "gates/checks/artifacts.h"

#include "gates/clip_frames.h"

namespace autooptim::gates {
namespace {

void add_run_problems(const std::string& name, const RunOutput& run, std::vector<std::string>& problems) {
  if (!run.error.empty()) problems.push_back(name + ": run failed: " + run.error);
  if (!finite_video(run.video)) problems.push_back(name + ": output has NaN/Inf pixels (unwritten or broken output)");
  if (run.unwritten_at_return)
    problems.push_back(name + ": the output was not complete when the run returned: written after the timed window");
}

}  // namespace

GateCheck check_artifacts(const GateEvidence& ev, const std::vector<std::string>& video_problems) {
  GateCheck g{"artifacts", true, "", nlohmann::json::object()};
  std::vector<std::string> problems;
  for (size_t k = 0; k < ev.clips.size(); ++k) {
    const GateClip& c = ev.clips[k];
    add_run_problems(c.name, c.run, problems);
    if (!c.pair && k < video_problems.size() && !video_problems[k].empty()) problems.push_back(video_problems[k]);
  }
  const RunOutput& audit = ev.audit;
  if (!audit.error.empty())
    problems.push_back("audit run failed: " + audit.error);
  else if (!finite_video(audit.video))
    problems.push_back("audit run: output has NaN/Inf pixels (unwritten or broken output)");
  else if (audit.unwritten_at_return)
    problems.push_back("audit run: the output was not complete when the run returned");
  g.pass = problems.empty();
  g.reason = g.pass ? "every run wrote a valid video of the declared size" : problems.front();
  g.details["problems"] = problems;
  return g;
}

}  // namespace autooptim::gates
