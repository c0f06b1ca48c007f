#include "gates/gate_files.h"

#include <filesystem>
#include <fstream>

#include "base/json_file.h"
#include "gates/clip_digest.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::gates {

std::string video_ext() {
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  return ".mp4";
#else
  return ".y4m";
#endif
}

std::vector<std::string> write_clip_videos(const GateEvidence& ev, const RunConfig& cfg, const std::string& out_dir) {
  const fs::path out(out_dir);
  const std::string ext = video_ext();
  std::vector<std::string> problems(ev.clips.size());
  for (size_t k = 0; k < ev.clips.size(); ++k) {
    const GateClip& c = ev.clips[k];
    if (c.pair) continue;
    const fs::path vf = out / "videos" / (c.name + ext);
    try {
      runtime::write_video(vf.string(), c.cand8, cfg.fps);
      const auto info = runtime::probe_video(vf.string());
      if (info.frames != cfg.frames || info.width != cfg.width || info.height != cfg.height)
        problems[k] = c.name + ": video has " + std::to_string(info.frames) + " frames of " +
                      std::to_string(info.width) + "x" + std::to_string(info.height) + ", expected " +
                      std::to_string(cfg.frames) + " of " + std::to_string(cfg.width) + "x" +
                      std::to_string(cfg.height);
    } catch (const Error& e) {
      problems[k] = e.what();
    }
  }
  const fs::path first = out / "videos" / (ev.prompts.at(0).id + ext);
  if (fs::exists(first)) fs::copy_file(first, out / ("video" + ext), fs::copy_options::overwrite_existing);
  return problems;
}

void write_gate_reports(const GateEvidence& ev, const GateVerdict& v, const json& quality, const json& visual,
                        const std::string& out_dir) {
  const fs::path out(out_dir);
  json clip_ids = json::object();
  for (const auto& c : ev.clips)
    if (!c.pair)
      clip_ids[c.name] = {{"seed", c.run.seed},
                          {"frames_sha256", frames_sha256(c.cand8)},
                          {"baseline_frames_sha256", frames_sha256(c.base8)},
                          {"seconds", c.run.seconds},
                          {"video", "videos/" + c.name + video_ext()}};
  base::write_json_file((out / "clips.json").string(), {{"manifest_hash", v.manifest_hash}, {"clips", clip_ids}});
  json trace = json::object();
  for (const auto& c : ev.clips) trace[c.name] = c.run.trace.to_json();
  base::write_json_file((out / "trace.json").string(), trace);
  json bench = {{"baseline", ev.timing.baseline.to_json()},
                {"candidate", ev.timing.candidate.to_json()},
                {"speedup", v.speedup},
                {"noise", ev.timing.noise},
                {"audit_s", ev.audit.seconds},
                {"off_s", ev.off_not_run.empty() ? json(ev.off_run.seconds) : json(nullptr)},
                {"stages", json::array()}};
  for (const auto& c : ev.clips)
    bench["stages"].push_back({{"clip", c.name},
                               {"total_s", c.run.seconds},
                               {"text_encoding_s", c.run.times.text_encoding},
                               {"denoising_s", c.run.times.denoising},
                               {"decoding_s", c.run.times.decoding}});
  base::write_json_file((out / "benchmark.json").string(), bench);
  base::write_json_file((out / "quality.json").string(),
                        {{"clips", quality}, {"visual", visual}, {"worst_psnr", v.psnr}, {"worst_ssim", v.ssim}});
}

void check_reports_parse(GateVerdict& v, const std::string& out_dir) {
  const fs::path out(out_dir);
  for (const char* f :
       {"trace.json", "benchmark.json", "quality.json", "manifest.json", "metadata.json", "clips.json"}) {
    try {
      std::ifstream in(out / f);
      const json parsed = json::parse(in);
      (void)parsed;
    } catch (const std::exception& e) {
      for (auto& c : v.checks)
        if (c.name == "artifacts") {
          c.pass = false;
          c.reason = std::string(f) + " is not valid JSON: " + e.what();
        }
      v.accepted = false;
    }
  }
}

}  // namespace autooptim::gates
