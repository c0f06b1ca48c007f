#include "gates/gate.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "gates/detectors.h"
#include "gates/metrics.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/flops.h"
#include "runtime/safetensors.h"
#include "runtime/stats.h"
#include "runtime/techniques/engagement.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::gates {
namespace {

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  if (!out) throw Error(path.string() + ": cannot write");
  out << j.dump(2) << "\n";
  out.flush();
  if (!out) throw Error(path.string() + ": write failed");
}

std::string video_ext() {
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  return ".mp4";
#else
  return ".y4m";
#endif
}

// 8-bit frames as a [T, 3, H, W] uint8 tensor and back, for the baseline-output cache.
at::Tensor frames_to_u8(const std::vector<cv::Mat>& frames) {
  return (runtime::tensor_from_frames(frames) * 255.0).round().clamp(0, 255).to(at::kByte);
}

bool same_frames(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || a[i].type() != b[i].type()) return false;
    if (cv::norm(a[i], b[i], cv::NORM_INF) != 0) return false;
  }
  return true;
}

bool finite(const at::Tensor& t) { return t.defined() && at::isfinite(t).all().item<bool>(); }

struct PromptRun {
  Prompt prompt;
  RunOutput cand;
  std::vector<cv::Mat> cand8, base8;
  at::Tensor base_float;  // when the baseline ran in this process
};

}  // namespace

const GateCheck* GateVerdict::check(const std::string& name) const {
  for (const auto& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

json GateVerdict::to_json() const {
  json gates = json::object();
  for (const auto& c : checks) gates[c.name] = {{"pass", c.pass}, {"reason", c.reason}, {"details", c.details}};
  return {{"manifest", manifest_id},
          {"manifest_hash", manifest_hash},
          {"split", split},
          {"accepted", accepted},
          {"refused", refused},
          {"baseline_seconds", baseline_seconds},
          {"candidate_seconds", candidate_seconds},
          {"speedup", speedup},
          {"psnr", psnr},
          {"ssim", ssim},
          {"failure_signature", failure_signature},
          {"gates", gates}};
}

Manifest find_manifest(const std::string& manifests_dir, const std::string& model, const std::string& id) {
  const fs::path dir = fs::path(manifests_dir) / model;
  if (!fs::is_directory(dir)) throw Error(dir.string() + ": no manifests folder for model '" + model + "'");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    Manifest m = load_manifest(f.string());
    if (m.id == id) return m;
  }
  throw Error("no manifest with id '" + id + "' under " + dir.string());
}

GateVerdict run_gate(Worker& w, const Manifest& cand, const std::string& split, const std::string& out_dir,
                     const GateSettings& S, Ledger* ledger) {
  const fs::path out(out_dir);
  fs::create_directories(out / "videos");
  GateVerdict v;
  v.manifest_id = cand.id;
  v.manifest_hash = manifest_hash(cand);
  v.split = split;
  const std::string build = Worker::build_id();
  const auto dev = w.device();

  // A manifest already rejected on this build is not run again under a cosmetic change.
  if (ledger) {
    for (const auto& row : ledger->read_all()) {
      if (row.value("manifest_hash", "") == v.manifest_hash && row.value("build", "") == build &&
          row.value("split", "") == split && !row.value("accepted", true) && !row.value("refused", false) &&
          !row.value("failure_signature", "").empty()) {
        v.refused = true;
        v.failure_signature = row.value("failure_signature", "");
        v.checks.push_back({"refused", false,
                            "manifest " + v.manifest_hash.substr(0, 12) + " was already rejected on this build (" +
                                v.failure_signature + ", as '" + row.value("manifest", "") +
                                "'); a retry that changes only cosmetics is refused"});
        write_json(out / "verdict.json", v.to_json());
        json r = v.to_json();
        r["build"] = build;
        ledger->append(r);
        return v;
      }
    }
  }

  const Manifest base = cand.kind == "baseline" ? cand : find_manifest(S.manifests_dir, cand.model, cand.base.value_or(""));
  if (base.kind != "baseline") throw Error("manifest '" + cand.id + "': its base '" + base.id + "' is not a baseline");
  auto prompts = load_prompts(S.prompts_dir, true).split(split);
  if (S.max_prompts > 0 && static_cast<int64_t>(prompts.size()) > S.max_prompts) prompts.resize(static_cast<size_t>(S.max_prompts));
  if (prompts.empty()) throw Error("split '" + split + "' has no prompts");
  // Progress: each generation below is announced (which run of how many, what it is for).
  const auto began = std::chrono::steady_clock::now();
  const int64_t np = static_cast<int64_t>(prompts.size()), nr = std::max<int64_t>(1, S.timing_repeats);
  const int64_t expected_runs = 2 + nr + std::max(nr, np) + std::max<int64_t>(0, np - nr) + 3;
  int64_t run_no = 0;
  auto tick = [&](const char* stage) {
    if (S.progress)
      S.progress({cand.id, split, stage, ++run_no, std::max(expected_runs, run_no),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count()});
  };

  write_json(out / "manifest.json", to_json(cand));
  json meta = {{"build", build},
               {"model", w.model()},
               {"weights", w.weights_label()},
               {"device", dev.is_cuda() ? "cuda" : "cpu"},
               {"device_name", runtime::device_name(dev)},
               {"clocks", runtime::gpu_clocks(dev)},
               {"cpu_threads", at::get_num_threads()},
               {"seed", cand.config.seed},
               {"split", split},
               {"prompts", json::array()},
               {"baseline", base.id},
               {"timing_repeats", S.timing_repeats},
               {"started", utc_timestamp()}};
  for (const auto& p : prompts) meta["prompts"].push_back(p.id);
  write_json(out / "metadata.json", meta);

  // Warm-up of both, untimed, so allocator and kernel selection costs do not land on either side.
  tick("warm-up baseline");
  w.run(base, prompts[0]);
  tick("warm-up candidate");
  w.run(cand, prompts[0]);

  // Interleaved timing: baseline, candidate, baseline, candidate, ... over the first prompts. The
  // candidate's outputs for quality come from these timed runs.
  std::vector<PromptRun> runs(prompts.size());
  std::vector<double> base_times, cand_times, paired_cand_times;
  // Stage times of every timed run, in order (where a slow run lost its time: text, denoising, decode).
  json timed_stages = json::array();
  auto stages = [](const char* who, const RunOutput& r) {
    return json{{"run", who}, {"total_s", r.seconds}, {"text_s", r.times.text_encoding},
                {"denoise_s", r.times.denoising}, {"decode_s", r.times.decoding}};
  };
  const int64_t R = std::max<int64_t>(1, S.timing_repeats);
  for (int64_t i = 0; i < std::max<int64_t>(R, static_cast<int64_t>(prompts.size())); ++i) {
    const size_t pi = static_cast<size_t>(i) % prompts.size();
    const bool timed_pair = i < R;
    RunOutput b;
    if (timed_pair) {
      tick("timed baseline");
      b = w.run(base, prompts[pi]);
      if (!b.error.empty()) throw Error("the baseline '" + base.id + "' failed: " + b.error);
      base_times.push_back(b.seconds);
      timed_stages.push_back(stages("baseline", b));
    }
    tick(timed_pair ? "timed candidate" : "candidate output");
    RunOutput c = w.run(cand, prompts[pi]);
    cand_times.push_back(c.seconds);
    timed_stages.push_back(stages("candidate", c));
    if (timed_pair) paired_cand_times.push_back(c.seconds);
    if (i < static_cast<int64_t>(prompts.size())) {
      runs[pi].prompt = prompts[pi];
      runs[pi].cand = std::move(c);
      if (timed_pair) runs[pi].base_float = b.video;
    }
  }

  // Baseline outputs: cached per build, baseline manifest, prompt and seed; a cached output that the
  // timed run contradicts means the baseline is nondeterministic, which the gate cannot judge.
  const fs::path cache = S.cache_dir.empty() ? out.parent_path() / "baseline-cache" : fs::path(S.cache_dir);
  const fs::path cdir = cache / build / manifest_hash(base).substr(0, 16);
  fs::create_directories(cdir);
  for (auto& r : runs) {
    const fs::path f = cdir / (r.prompt.id + "-" + std::to_string(base.config.seed) + ".safetensors");
    if (!r.base_float.defined() && fs::exists(f)) {
      const at::Tensor u8 = runtime::SafetensorsFile::open(f.string())->tensor("video").clone();
      r.base8 = runtime::frames_from_tensor(u8.to(at::kFloat) / 255.0);
      continue;
    }
    if (!r.base_float.defined()) {
      tick("baseline output");
      RunOutput b = w.run(base, r.prompt);
      if (!b.error.empty()) throw Error("the baseline '" + base.id + "' failed: " + b.error);
      r.base_float = b.video;
    }
    r.base8 = runtime::frames_from_tensor(r.base_float);
    // Temporary name + rename: workers gating in parallel share this cache and must never read half a file.
    const std::string tmp = f.string() + ".tmp" + std::to_string(::getpid());
    runtime::write_safetensors(tmp, {{"video", frames_to_u8(r.base8)}});
    fs::rename(tmp, f);
  }

  // Duplicate-prompt audit: the first prompt again must cost the same and give the same clip.
  tick("duplicate-prompt audit");
  const RunOutput audit = w.run(cand, prompts[0]);

  // Off run: the same build with the technique's flags off, next to one more baseline run.
  const Manifest off = with_flags_off(cand);
  tick("off run: baseline");
  const RunOutput off_base = w.run(base, prompts[0]);
  tick("off run: flags off");
  const RunOutput off_run = w.run(off, prompts[0]);
  base_times.push_back(off_base.seconds);
  timed_stages.push_back(stages("audit", audit));
  timed_stages.push_back(stages("baseline", off_base));
  timed_stages.push_back(stages("off", off_run));

  for (auto& r : runs) r.cand8 = runtime::frames_from_tensor(r.cand.video);

  const auto bstats = runtime::TimingStats::of(base_times);
  const auto cstats = runtime::TimingStats::of(cand_times);
  const auto pstats = runtime::TimingStats::of(paired_cand_times);
  v.baseline_seconds = bstats.median;
  v.candidate_seconds = cstats.median;
  v.speedup = cstats.median > 0 ? bstats.median / cstats.median : 0.0;
  const double noise = std::max(bstats.spread(), pstats.spread());
  const double margin = std::max(S.min_margin, noise);

  // --- 1. artifacts: every run finished, wrote finite pixels, and every file is there and valid.
  {
    GateCheck g{"artifacts", true, "", json::object()};
    std::vector<std::string> problems;
    const std::string ext = video_ext();
    for (auto& r : runs) {
      if (!r.cand.error.empty()) problems.push_back(r.prompt.id + ": run failed: " + r.cand.error);
      if (!finite(r.cand.video)) problems.push_back(r.prompt.id + ": output has NaN/Inf pixels (unwritten or broken output)");
      const fs::path vf = out / "videos" / (r.prompt.id + ext);
      try {
        runtime::write_video(vf.string(), r.cand8, cand.config.fps);
        const auto info = runtime::probe_video(vf.string());
        if (info.frames != cand.config.frames || info.width != cand.config.width || info.height != cand.config.height)
          problems.push_back(r.prompt.id + ": video has " + std::to_string(info.frames) + " frames of " +
                             std::to_string(info.width) + "x" + std::to_string(info.height) + ", expected " +
                             std::to_string(cand.config.frames) + " of " + std::to_string(cand.config.width) + "x" +
                             std::to_string(cand.config.height));
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
    }
    if (!runs.empty() && fs::exists(out / "videos" / (runs[0].prompt.id + ext)))
      fs::copy_file(out / "videos" / (runs[0].prompt.id + ext), out / ("video" + ext), fs::copy_options::overwrite_existing);
    if (!audit.error.empty()) problems.push_back("audit run failed: " + audit.error);
    g.pass = problems.empty();
    g.reason = g.pass ? "every run wrote a valid video of the declared size" : problems.front();
    g.details["problems"] = problems;
    v.checks.push_back(g);
  }

  // --- 2. official config.
  {
    const RunConfig off_cfg = official_config(cand.model);
    GateCheck g{"official_config", cand.config == off_cfg, "", {{"official", to_json(off_cfg)}, {"candidate", to_json(cand.config)}}};
    g.reason = g.pass ? "the official setting" : "config differs from the official setting (measured, but it can never win a tier)";
    v.checks.push_back(g);
  }

  // --- 3. performance: faster by more than the noise, not below the physical floor, no caching
  // across requests.
  {
    GateCheck g{"performance", true, "", json::object()};
    const auto& tc = w.pipeline().transformer()->config();
    const auto& vc = w.pipeline().vae()->config();
    const int64_t T = (cand.config.frames - 1) / vc.scale_factor_temporal + 1;
    const auto fl = runtime::transformer_flops(tc, 1, T, cand.config.height / vc.scale_factor_spatial,
                                               cand.config.width / vc.scale_factor_spatial, w.pipeline().max_text_length, false);
    const double forwards = runs.empty() ? 0.0 : runs[0].cand.trace.get("transformer.forwards");
    const double peak = w.peak_tflops();
    // The floor counts only the GEMMs of the forwards that really ran: attention may be sparse.
    const double floor_s = forwards * fl.linear / (peak * 1e12);
    g.details = {{"baseline", bstats.to_json()}, {"candidate", cstats.to_json()}, {"noise", noise}, {"margin", margin},
                 {"speedup", v.speedup}, {"floor_s", floor_s}, {"peak_tflops", peak}, {"forwards", forwards},
                 {"audit_s", audit.seconds}, {"runs", timed_stages}};
    const double first = runs.empty() ? 0.0 : runs[0].cand.seconds;
    const double audit_drop = first > 0 ? 1.0 - audit.seconds / first : 0.0;
    if (v.speedup < 1.0 + margin) {
      g.pass = false;
      g.reason = "not faster than the baseline beyond the noise: " + std::to_string(v.speedup) + "x, needs > " +
                 std::to_string(1.0 + margin) + "x";
    } else if (cstats.min < floor_s) {
      g.pass = false;
      g.reason = "a run took " + std::to_string(cstats.min) + " s, below the physical floor of " + std::to_string(floor_s) + " s";
    } else if (audit_drop > std::max(3 * margin, 0.25)) {
      g.pass = false;
      g.reason = "duplicate-prompt audit: the same prompt cost " + std::to_string(first) + " s then " +
                 std::to_string(audit.seconds) + " s (caching across requests)";
    } else if (!runs.empty() && !same_frames(runtime::frames_from_tensor(audit.video), runs[0].cand8)) {
      g.pass = false;
      g.reason = "duplicate-prompt audit: the same prompt gave a different clip the second time";
    } else {
      g.reason = std::to_string(v.speedup) + "x faster (noise " + std::to_string(noise) + ")";
    }
    v.checks.push_back(g);
  }

  // --- 4. off identity: flags off reproduces the baseline's output and time.
  {
    GateCheck g{"off_identity", true, "", json::object()};
    const auto off8 = runtime::frames_from_tensor(off_run.video);
    const auto& ref8 = runs[0].base8;
    double psnr_off = kPsnrCap;
    bool same = off_run.error.empty() && finite(off_run.video) && same_frames(off8, ref8);
    if (!same && off_run.error.empty() && off8.size() == ref8.size()) psnr_off = compare_clips(off8, ref8).psnr_min;
    const double ratio = bstats.median > 0 ? off_run.seconds / bstats.median : 0.0;
    const double tol = std::max(2 * noise, S.off_time_tolerance);
    g.details = {{"bit_identical", same}, {"psnr_min", psnr_off}, {"off_seconds", off_run.seconds}, {"time_ratio", ratio},
                 {"time_tolerance", tol}, {"off_manifest", to_json(off)}};
    if (!off_run.error.empty()) {
      g.pass = false;
      g.reason = "the off run failed: " + off_run.error;
    } else if (!same && (S.exact_off_identity || psnr_off < S.lossless_psnr)) {
      g.pass = false;
      g.reason = "with the technique's flags off the output differs from the baseline's (PSNR " + std::to_string(psnr_off) + " dB)";
    } else if (std::fabs(ratio - 1.0) > tol) {
      g.pass = false;
      g.reason = "with the flags off the time is " + std::to_string(ratio) + "x the baseline's (tolerance " + std::to_string(tol) + ")";
    } else {
      g.reason = same ? "flags off: bit-identical output, same time" : "flags off: output within tolerance, same time";
    }
    v.checks.push_back(g);
  }

  // --- 5. quantitative quality against the baseline's own output, prompt by prompt.
  json quality = json::object();
  {
    GateCheck g{"quality", true, "", json::object()};
    double worst_psnr = kPsnrCap, worst_ssim = 1.0;
    std::string why;
    for (const auto& r : runs) {
      if (r.cand8.size() != r.base8.size() || (!r.cand8.empty() && r.cand8[0].size() != r.base8[0].size())) {
        why = r.prompt.id + ": the clip's size differs from the baseline's (another config)";
        worst_psnr = 0;
        worst_ssim = 0;
        quality[r.prompt.id] = {{"comparable", false}};
        continue;
      }
      const auto q = compare_clips(r.cand8, r.base8);
      quality[r.prompt.id] = gates::to_json(q);
      if (!(q.psnr_mean >= worst_psnr)) worst_psnr = std::isnan(q.psnr_mean) ? 0 : q.psnr_mean;
      if (!(q.ssim_mean >= worst_ssim)) worst_ssim = std::isnan(q.ssim_mean) ? 0 : q.ssim_mean;
    }
    v.psnr = worst_psnr;
    v.ssim = worst_ssim;
    const double need_psnr = cand.lossless ? S.lossless_psnr : S.min_psnr;
    const double need_ssim = cand.lossless ? 0.999 : S.min_ssim;
    g.details = {{"worst_psnr", worst_psnr}, {"worst_ssim", worst_ssim}, {"min_psnr", need_psnr}, {"min_ssim", need_ssim},
                 {"lossless", cand.lossless}};
    if (!why.empty()) {
      g.pass = false;
      g.reason = why;
    } else if (worst_psnr < need_psnr || worst_ssim < need_ssim) {
      g.pass = false;
      g.reason = "quality below tolerance: worst PSNR " + std::to_string(worst_psnr) + " dB (needs " + std::to_string(need_psnr) +
                 "), worst SSIM " + std::to_string(worst_ssim) + " (needs " + std::to_string(need_ssim) + ")";
    } else {
      g.reason = "worst PSNR " + std::to_string(worst_psnr) + " dB, worst SSIM " + std::to_string(worst_ssim);
    }
    v.checks.push_back(g);
  }

  // --- 6. visual check: no artifact the baseline does not have.
  json visual = json::object();
  {
    GateCheck g{"visual", true, "", json::object()};
    std::vector<std::string> found;
    for (const auto& r : runs) {
      const auto cr = visual_report(runtime::float_frames_from_tensor(r.cand.video));
      const auto br = visual_report(r.base8);
      visual[r.prompt.id] = {{"candidate", gates::to_json(cr)}, {"baseline", gates::to_json(br)}};
      for (const auto& reason : new_artifacts(cr, br)) found.push_back(r.prompt.id + ": " + reason);
    }
    g.pass = found.empty();
    g.reason = g.pass ? "no artifact beyond the baseline's" : found.front();
    g.details["new_artifacts"] = found;
    v.checks.push_back(g);
  }

  // --- authenticity: the technique engaged as its flags say, and a lossy one changed the output.
  {
    GateCheck g{"authenticity", true, "", json::object()};
    const auto techs = technique_flags_set(cand);
    const auto opts = to_runtime_options(cand);
    std::vector<std::string> problems;
    for (const auto& r : runs) {
      for (const auto& p : runtime::engagement_problems(opts, r.cand.trace)) problems.push_back(r.prompt.id + ": " + p);
      if (!problems.empty()) break;
    }
    if (problems.empty() && !techs.empty() && !cand.lossless && !runs.empty() &&
        same_frames(runs[0].cand8, runtime::frames_from_tensor(off_run.video)))
      problems.push_back("a lossy technique whose output equals the off run's: it changed nothing");
    g.details = {{"technique_flags", techs}, {"trace", runs.empty() ? json::object() : runs[0].cand.trace.to_json()}};
    g.pass = problems.empty();
    g.reason = g.pass ? (techs.empty() ? "no technique flags (baseline or control)" : "engaged: counters consistent with the flags")
                      : problems.front();
    g.details["problems"] = problems;
    v.checks.push_back(g);
  }

  v.accepted = std::all_of(v.checks.begin(), v.checks.end(), [](const GateCheck& c) { return c.pass; });
  if (!v.accepted) {
    static const std::vector<std::pair<std::string, std::string>> signatures = {
        {"artifacts", "artifact"},        {"authenticity", "no-op"},          {"off_identity", "off-identity-break"},
        {"quality", "quality-cliff"},     {"visual", "visual-artifact"},      {"performance", "slowdown"},
        {"official_config", "off-official-config"}};
    for (const auto& [gate, sig] : signatures)
      if (const auto* c = v.check(gate); c && !c->pass) {
        v.failure_signature = sig;
        break;
      }
  }

  // Fixed-name artifacts.
  json trace = json::object();
  for (const auto& r : runs) trace[r.prompt.id] = r.cand.trace.to_json();
  write_json(out / "trace.json", trace);
  json bench = {{"baseline", bstats.to_json()}, {"candidate", cstats.to_json()}, {"paired_candidate", pstats.to_json()},
                {"speedup", v.speedup}, {"noise", noise}, {"audit_s", audit.seconds}, {"off_s", off_run.seconds},
                {"stages", json::array()}};
  for (const auto& r : runs)
    bench["stages"].push_back({{"prompt", r.prompt.id}, {"total_s", r.cand.seconds}, {"text_encoding_s", r.cand.times.text_encoding},
                               {"denoising_s", r.cand.times.denoising}, {"decoding_s", r.cand.times.decoding}});
  write_json(out / "benchmark.json", bench);
  write_json(out / "quality.json", {{"clips", quality}, {"visual", visual}, {"worst_psnr", v.psnr}, {"worst_ssim", v.ssim}});
  // The artifacts gate also checks that the files it relies on parse back.
  for (const char* f : {"trace.json", "benchmark.json", "quality.json", "manifest.json", "metadata.json"}) {
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
  write_json(out / "verdict.json", v.to_json());
  if (ledger) {
    json row = v.to_json();
    row["build"] = build;
    row["model"] = w.model();
    row["device"] = meta["device"];
    row["device_name"] = meta["device_name"];
    row["clocks"] = meta["clocks"];
    row["seed"] = cand.config.seed;
    row["out_dir"] = out.string();
    row["family"] = cand.family;
    row["kind"] = cand.kind;
    ledger->append(row);
  }
  return v;
}

}  // namespace autooptim::gates
