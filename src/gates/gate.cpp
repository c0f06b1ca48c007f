#include "gates/gate.h"
#include "base/json_file.h"
#include "base/utc_time.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>

#include "gates/clip_digest.h"
#include "gates/detectors.h"
#include "gates/integrity.h"
#include "gates/metrics.h"
#include "base/sha256.h"
#include "runtime/blas_threads.h"
#include "runtime/device.h"
#include "base/error.h"
#include "runtime/flops.h"
#include "runtime/safetensors.h"
#include "base/stats.h"
#include "runtime/techniques/engagement.h"
#include "runtime/techniques/registry.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::gates {
namespace {

void write_json(const fs::path& path, const json& j) { base::write_json_file(path.string(), j); }

std::string video_ext() {
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  return ".mp4";
#else
  return ".y4m";
#endif
}

std::string num(double v, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// 8-bit frames as a [T, 3, H, W] uint8 tensor and back, for the baseline-output cache.
at::Tensor frames_to_u8(const std::vector<cv::Mat>& frames) {
  return (runtime::tensor_from_frames(frames) * 255.0).round().clamp(0, 255).to(at::kByte);
}

// A clip of the gate's output cache (8-bit frames in a safetensors file), or nullopt when none is there.
std::optional<std::vector<cv::Mat>> read_cached_clip(const fs::path& f) {
  if (!fs::exists(f)) return std::nullopt;
  const at::Tensor u8 = runtime::SafetensorsFile::open(f.string())->tensor("video").clone();
  return runtime::frames_from_tensor(u8.to(at::kFloat) / 255.0);
}

// Temporary name + rename: workers gating in parallel share the cache and must never read half a file.
void write_cached_clip(const fs::path& f, const std::vector<cv::Mat>& frames) {
  const std::string tmp = f.string() + ".tmp" + std::to_string(::getpid());
  runtime::write_safetensors(tmp, {{"video", frames_to_u8(frames)}});
  fs::rename(tmp, f);
}

bool same_frames(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || a[i].type() != b[i].type()) return false;
    if (cv::norm(a[i], b[i], cv::NORM_INF) != 0) return false;
  }
  return true;
}

// Same frame count and each frame the same size: clips a metric can compare.
bool same_shape(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size()) return false;
  return true;
}

bool finite(const at::Tensor& t) { return t.defined() && at::isfinite(t).all().item<bool>(); }

double median_of(std::vector<double> v) { return runtime::TimingStats::of(std::move(v)).median; }

// Relative noise that one disturbed run does not inflate: 1.4826 x the median absolute deviation over
// the median (the standard deviation's estimate for normal noise).
double robust_noise(const std::vector<double>& v) {
  const double m = median_of(v);
  if (v.size() < 2 || m <= 0) return 0.0;
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 1.4826 * median_of(dev) / m;
}

// One candidate clip and the baseline clip of the same prompt and seed.
struct Clip {
  std::string name;  // the prompt id (the split at the official seed) or "pair<i>:<id>@<seed>"
  bool pair = false;  // a timed pair's clip: prompt and seed drawn inside the candidate's timed window
  const RunOutput* cand = nullptr;
  std::vector<cv::Mat> cand8, base8;
};

// One generation of the gate's sequence, with the process sampled around it.
struct Window {
  std::string role;  // warmup_baseline, warmup_candidate, candidate, baseline, candidate_split, audit, baseline_check, off, baseline_split
  bool candidate_code = false;  // the candidate's manifest (or its off run) ran in it
  ProcessSample before, after;
  RunOutput out;
};

// The progress line's words for a window's role.
const char* stage_label(const std::string& role) {
  static const std::map<std::string, const char*> labels = {
      {"warmup_baseline", "warm-up baseline"},   {"warmup_candidate", "warm-up candidate"},
      {"candidate", "timed candidate"},          {"baseline", "timed baseline"},
      {"candidate_split", "candidate output"},   {"audit", "duplicate-prompt audit"},
      {"baseline_check", "off run: baseline"},   {"off", "off run: flags off"},
      {"baseline_split", "baseline output"},     {"recheck_fresh", "recheck: fresh draw"},
      {"recheck_seen", "recheck: official seed"}, {"precision_control", "precision control"}};
  const auto it = labels.find(role);
  return it == labels.end() ? "run" : it->second;
}

int64_t branches_of(const RunConfig& c) { return c.guidance > 1.0 ? 2 : 1; }

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

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
          {"baseline_hash", baseline_hash},
          {"integrity", integrity},
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

namespace {

// Every judgement setting a gate request carries, by its key: the one list settings_to_json and
// settings_from_json both walk (a setting missing here stays at the worker's default).
template <class Settings, class Visit>
void each_setting(Settings& s, Visit&& visit) {
  visit("prompts_dir", s.prompts_dir);
  visit("cache_dir", s.cache_dir);
  visit("records_path", s.records_path);
  visit("timing_repeats", s.timing_repeats);
  visit("min_margin", s.min_margin);
  visit("min_psnr", s.min_psnr);
  visit("min_ssim", s.min_ssim);
  visit("lossless_psnr", s.lossless_psnr);
  visit("precision_floor", s.precision_floor);
  visit("floor_psnr_slack", s.floor_psnr_slack);
  visit("floor_ssim_slack", s.floor_ssim_slack);
  visit("floor_clip_psnr_slack", s.floor_clip_psnr_slack);
  visit("floor_clip_ssim_slack", s.floor_clip_ssim_slack);
  visit("audit_psnr_slack", s.audit_psnr_slack);
  visit("off_time_tolerance", s.off_time_tolerance);
  visit("exact_off_identity", s.exact_off_identity);
  visit("max_prompts", s.max_prompts);
  visit("min_baseline_efficiency", s.min_baseline_efficiency);
  visit("baseline_record_tolerance", s.baseline_record_tolerance);
  visit("untimed_work_fraction", s.untimed_work_fraction);
  visit("min_forward_share", s.min_forward_share);
  visit("object_check", s.object_check);
}

}  // namespace

json settings_to_json(const GateSettings& s) {
  json j = json::object();
  each_setting(s, [&](const char* key, const auto& field) { j[key] = field; });
  return j;
}

GateSettings settings_from_json(const json& j) {
  GateSettings s;
  if (!j.is_object()) throw Error("gate settings: not a JSON object");
  each_setting(s, [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      field = j.at(key).get<std::decay_t<decltype(field)>>();
    } catch (const json::exception&) {
      throw Error(std::string("gate settings: '") + key + "' has the wrong type (" + j.at(key).type_name() + ")");
    }
  });
  return s;
}

Manifest pinned_baseline(const std::string& model) {
  const json j = {{"id", model + "/baseline"},
                  {"kind", "baseline"},
                  {"family", "none"},
                  {"model", model},
                  {"runtime", "autooptim/1"},
                  {"base", nullptr},
                  {"flags", json::object()},
                  {"lossless", true},
                  {"config", to_json(official_config(model))},
                  {"description", "the harness's pinned baseline: every technique off, libtorch's own threads"}};
  return parse_manifest(j, "the pinned baseline of " + model);
}

json gate_environment(Worker& w) {
  const auto dev = w.device();
  return {{"build", Worker::build_id()},
          {"weights_hash", w.weights_hash()},
          {"device", dev.is_cuda() ? "cuda" : "cpu"},
          {"device_name", runtime::device_name(dev)},
          {"dtype", dtype_name(w.request().precision.compute)},
          // The CPU BLAS's own threads change every CPU timing (runtime/blas_threads.h): a verdict holds for one setting.
          {"blas", runtime::settle_blas_threads()}};
}

bool same_environment(const json& row, Worker& w) {
  const json env = gate_environment(w);
  for (const auto& [k, v] : env.items())
    if (!row.contains(k) || row[k] != v) return false;
  return true;
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
  const json env = gate_environment(w);
  auto ledger_row = [&](const GateVerdict& verdict) {
    json row = verdict.to_json();
    for (const auto& [k, val] : env.items()) row[k] = val;
    return row;
  };

  // A manifest already rejected in this environment is not run again under a cosmetic change. Not the
  // baseline: its own gate is its measurement ("not faster than itself" is no rejection), and a resumed run
  // must be able to measure it again (issue 38).
  if (ledger && cand.kind != "baseline") {
    for (const auto& row : ledger->read_all()) {
      if (row.value("manifest_hash", "") == v.manifest_hash && same_environment(row, w) &&
          row.value("split", "") == split && !row.value("accepted", true) && !row.value("refused", false) &&
          !row.value("failure_signature", "").empty()) {
        v.refused = true;
        v.failure_signature = row.value("failure_signature", "");
        v.checks.push_back({"refused", false,
                            "manifest " + v.manifest_hash.substr(0, 12) + " was already rejected on this build (" +
                                v.failure_signature + ", as '" + row.value("manifest", "") +
                                "'); a retry that changes only cosmetics is refused"});
        write_json(out / "verdict.json", v.to_json());
        ledger->append(ledger_row(v));
        return v;
      }
    }
  }

  // The baseline: the harness's pinned one, at the harness's configuration; never a candidate's choice.
  const Manifest pinned = pinned_baseline(cand.model);
  Manifest base = pinned;
  if (S.baseline_config) {
    base.config = *S.baseline_config;
    base = parse_manifest(to_json(base), "the pinned baseline at the run's configuration");
  }
  if (cand.kind != "baseline" && cand.base.value_or("") != base.id)
    throw Error("manifest '" + cand.id + "': its base '" + cand.base.value_or("") + "' is not the harness's baseline '" +
                base.id + "' (the baseline always comes from the harness, never from a manifest)");
  v.baseline_hash = manifest_hash(base);
  v.integrity["baseline"] = {{"id", base.id},
                             {"hash", v.baseline_hash},
                             {"pinned_hash", manifest_hash(pinned)},
                             {"source", S.baseline_config ? "pinned, at the harness's configuration" : "pinned"}};

  auto prompts = load_prompts(S.prompts_dir, true).split(split);
  if (S.max_prompts > 0 && static_cast<int64_t>(prompts.size()) > S.max_prompts) prompts.resize(static_cast<size_t>(S.max_prompts));
  if (prompts.empty()) throw Error("split '" + split + "' has no prompts");
  // Progress: each generation below is announced (which run of how many, what it is for).
  const auto began = std::chrono::steady_clock::now();
  const int64_t np = static_cast<int64_t>(prompts.size()), nr = std::max<int64_t>(1, S.timing_repeats);
  // warm-ups, the timed pairs, the split, the audit, the baseline check, the off run, the split's baselines
  const int64_t expected_runs = 2 + 2 * nr + np + 3 + (np - 1);
  int64_t run_no = 0;
  auto tick = [&](const char* stage) {
    if (S.progress)
      S.progress({cand.id, split, stage, ++run_no, std::max(expected_runs, run_no),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count()});
  };

  write_json(out / "manifest.json", to_json(cand));
  json meta = env;  // build, weights hash, device, device name, dtype, BLAS threads
  meta.update({{"model", w.model()},
               {"weights", w.weights_label()},
               {"clocks", runtime::gpu_clocks(dev)},
               {"cpu_threads", at::get_num_threads()},
               {"seed", cand.config.seed},
               {"split", split},
               {"prompts", json::array()},
               {"baseline", base.id},
               {"baseline_hash", v.baseline_hash},
               {"timing_repeats", S.timing_repeats},
               {"started", base::utc_timestamp()}});
  for (const auto& p : prompts) meta["prompts"].push_back(p.id);
  write_json(out / "metadata.json", meta);

  // ---- The sequence of generations. Every one is a window with the process sampled around it.
  ProcessMonitor mon;
  std::deque<Window> windows;  // a deque: references to earlier windows stay valid
  auto window = [&](const std::string& role, bool candidate_code, const std::function<RunOutput()>& fn) -> const RunOutput& {
    tick(stage_label(role));
    Window win;
    win.role = role;
    win.candidate_code = candidate_code;
    win.before = mon.sample();
    win.out = fn();
    win.after = mon.sample();
    windows.push_back(std::move(win));
    return windows.back().out;
  };
  auto baseline_ok = [&](const RunOutput& b) {
    if (!b.error.empty()) throw Error("the baseline '" + base.id + "' failed: " + b.error);
  };

  // Warm-up, untimed, so allocator and kernel selection costs land on neither side: the baseline first
  // (the threads alive after it are the harness's own), then the candidate, each on a fresh prompt/seed.
  window("warmup_baseline", false, [&] { return w.run_drawn(base, prompts); });
  mon.adopt_current_threads();
  const int threads_reference = thread_count();
  const int base_threads = at::get_num_threads();
  const int64_t cand_threads_flag = to_runtime_options(cand).cpu_threads;
  const size_t first_candidate_window = windows.size();
  window("warmup_candidate", true, [&] { return w.run_drawn(cand, prompts); });

  // Timed pairs: the candidate first, on a prompt and seed drawn inside its timed window (so nothing
  // before the timer can know them, and no baseline output of them exists anywhere yet), then the
  // baseline on the same prompt and seed.
  const int64_t R = std::max<int64_t>(1, S.timing_repeats);
  std::vector<size_t> pair_cand, pair_base;
  // Next to each judged baseline run, the machine's throughput at the model's shapes is calibrated, so
  // that both see the same load on the machine.
  std::vector<Calibration> base_cals;
  for (int64_t i = 0; i < R; ++i) {
    const RunOutput& c = window("candidate", true, [&] { return w.run_drawn(cand, prompts); });
    const Prompt drawn = c.prompt;
    const int64_t seed = c.seed;
    pair_cand.push_back(windows.size() - 1);
    base_cals.push_back(w.calibrate(base.config));
    baseline_ok(window("baseline", false, [&] { return w.run(base, drawn, seed); }));
    pair_base.push_back(windows.size() - 1);
  }
  // The candidate on the split at the official seed (the clips of the quality gate), before any baseline
  // output of them is made or read in this gate.
  std::vector<size_t> split_cand;
  for (const auto& p : prompts) {
    window("candidate_split", true, [&] { return w.run(cand, p); });
    split_cand.push_back(windows.size() - 1);
  }
  // Duplicate-prompt audit: the first pair's prompt and seed again must cost the same and give the same clip.
  const Prompt audit_prompt = windows[pair_cand[0]].out.prompt;
  const int64_t audit_seed = windows[pair_cand[0]].out.seed;
  window("audit", true, [&] { return w.run(cand, audit_prompt, audit_seed); });
  const size_t audit_i = windows.size() - 1;
  // A fresh baseline run at the official seed of the first prompt (the off run's reference and the check
  // of the cached baseline output), next to the off run: the same build with the technique's flags off.
  const Manifest off = with_flags_off(cand);
  base_cals.push_back(w.calibrate(base.config));
  baseline_ok(window("baseline_check", false, [&] { return w.run(base, prompts[0]); }));
  const size_t check_i = windows.size() - 1;
  window("off", true, [&] { return w.run(off, prompts[0]); });
  const size_t off_i = windows.size() - 1;

  // Baseline outputs of the rest of the split: cached per gate environment (build, weights, device, dtype,
  // BLAS threads), libtorch threads and baseline manifest; made here when missing.
  const fs::path cache = S.cache_dir.empty() ? out.parent_path() / "baseline-cache" : fs::path(S.cache_dir);
  json cache_key = env;  // the gate environment, plus the baseline's threads and manifest
  cache_key["cpu_threads"] = base_threads;
  cache_key["baseline_hash"] = v.baseline_hash;
  const std::string cache_key_hash = sha256_hex(cache_key.dump()).substr(0, 16);
  const fs::path cdir = cache / cache_key_hash;
  fs::create_directories(cdir);
  if (!fs::exists(cdir / "key.json")) write_json(cdir / "key.json", cache_key);
  std::vector<std::vector<cv::Mat>> split_base8(prompts.size());
  json cache_check = {{"dir", cdir.string()}, {"key", cache_key}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const fs::path f = cdir / (prompts[i].id + "-" + std::to_string(base.config.seed) + ".safetensors");
    std::optional<std::vector<cv::Mat>> cached = read_cached_clip(f);
    if (i == 0) {
      // The promised check: the cached output must be what a fresh run makes now.
      split_base8[0] = runtime::frames_from_tensor(windows[check_i].out.video);
      if (cached) {
        const bool same = same_frames(*cached, split_base8[0]);
        const double p = same ? kPsnrCap : same_shape(*cached, split_base8[0]) ? compare_clips(*cached, split_base8[0]).psnr_min : 0;
        cache_check["checked"] = prompts[0].id;
        cache_check["bit_identical"] = same;
        cache_check["psnr_min"] = p;
        if (!same && (S.exact_off_identity || p < S.lossless_psnr))
          throw BaselineError("the cached baseline output " + f.string() + " differs from a fresh run of the baseline (PSNR " +
                              num(p, 2) + " dB): the cache is stale or the baseline is nondeterministic here; remove " +
                              cdir.string() + " and run again");
      } else {
        write_cached_clip(f, split_base8[0]);
        cache_check["checked"] = nullptr;
        cache_check["note"] = "no cached output yet: the fresh run was cached";
      }
      continue;
    }
    if (cached) {
      split_base8[i] = std::move(*cached);
      continue;
    }
    const RunOutput& b = window("baseline_split", false, [&] { return w.run(base, prompts[i]); });
    baseline_ok(b);
    split_base8[i] = runtime::frames_from_tensor(b.video);
    write_cached_clip(f, split_base8[i]);
  }
  v.integrity["baseline_cache"] = cache_check;

  // Authenticity (b) below compares the candidate on prompts/seeds whose baseline output exists (the
  // split at the official seed) with its fresh draws of the timed pairs. Those runs are minutes apart, and
  // a load spike on a busy machine can slow the fresh ones several-fold (measured: 14.2 s against 2.0 s on
  // a CI-like 2-core machine). When they disagree by more than (b) could ever let through (half), one
  // adjacent pair decides: a fresh draw, then the first prompt at the official seed (whose baseline output
  // exists now). A candidate that depends on the baseline's outputs is faster on the second of the pair
  // too; a load spike is not in both places at once.
  std::vector<double> cand_times, cand_split_times;
  for (size_t i : pair_cand) cand_times.push_back(windows[i].out.seconds);
  for (size_t i : split_cand) cand_split_times.push_back(windows[i].out.seconds);
  std::optional<std::pair<size_t, size_t>> recheck;
  {
    const double fresh = median_of(cand_times), seen = median_of(cand_split_times);
    if (fresh > 0 && seen < 0.5 * fresh) {
      window("recheck_fresh", true, [&] { return w.run_drawn(cand, prompts); });
      const size_t a = windows.size() - 1;
      window("recheck_seen", true, [&] { return w.run(cand, prompts[0]); });
      recheck = std::make_pair(a, windows.size() - 1);
    }
  }

  const RunOutput& audit = windows[audit_i].out;
  const RunOutput& off_run = windows[off_i].out;
  const RunOutput& off_base = windows[check_i].out;

  // ---- Timing.
  std::vector<double> base_times;
  for (size_t i : pair_base) base_times.push_back(windows[i].out.seconds);
  base_times.push_back(off_base.seconds);
  json timed_stages = json::array();
  for (const auto& win : windows) {
    if (win.role.rfind("warmup", 0) == 0) continue;
    const auto& r = win.out;
    timed_stages.push_back({{"run", win.role}, {"prompt", r.prompt.id}, {"seed", r.seed}, {"total_s", r.seconds},
                            {"text_s", r.times.text_encoding}, {"denoise_s", r.times.denoising},
                            {"decode_s", r.times.decoding}});
  }
  const auto bstats = runtime::TimingStats::of(base_times);
  const auto cstats = runtime::TimingStats::of(cand_times);
  v.baseline_seconds = bstats.median;
  v.candidate_seconds = cstats.median;
  v.speedup = cstats.median > 0 ? bstats.median / cstats.median : 0.0;
  const double noise = std::max(bstats.spread(), cstats.spread());
  const double margin = std::max(S.min_margin, noise);

  // ---- Work the candidate did outside its own windows: the CPU time of threads other than the harness's
  // own during the baseline's runs and between runs, a warm-up beyond two timed runs, device work left
  // queued at a window's start, and threads of its own still alive after its runs.
  json untimed = json::object();
  std::vector<std::string> untimed_problems;
  {
    double gaps_cpu = 0, foreign_in_baseline = 0, queued_device_s = 0;
    json thread_census = json::array();
    // A candidate that asks for more CPU threads than the baseline grows libtorch's pool once: those
    // threads are allowed (they sit idle outside its runs, which the CPU accounting checks).
    const int allowance = cand_threads_flag > base_threads ? static_cast<int>(cand_threads_flag) - base_threads : 0;
    int worst_extra = 0;
    std::string worst_after;
    for (size_t i = first_candidate_window; i < windows.size(); ++i) {
      const Window& win = windows[i];
      const Window& prev = windows[i - 1];
      // Between windows the harness's own threads do the gate's work; any other thread's is the candidate's.
      gaps_cpu += std::max(0.0, win.before.foreign_cpu_s() - prev.after.foreign_cpu_s());
      if (!win.candidate_code) foreign_in_baseline += std::max(0.0, win.after.foreign_cpu_s() - win.before.foreign_cpu_s());
      if (i > first_candidate_window) queued_device_s += win.out.pre_sync_s;
      const int extra = win.after.threads - threads_reference;
      thread_census.push_back({{"after", win.role}, {"threads", win.after.threads}});
      if (extra > worst_extra) {
        worst_extra = extra;
        worst_after = win.role;
      }
    }
    std::vector<double> timed_cpu;
    for (size_t i : pair_cand) timed_cpu.push_back(windows[i].after.process_cpu_s - windows[i].before.process_cpu_s);
    const double run_cpu = median_of(timed_cpu);
    const Window& wu = windows[first_candidate_window];
    const double warmup_cpu = wu.after.process_cpu_s - wu.before.process_cpu_s;
    const double warmup_excess = std::max(0.0, warmup_cpu - 2.0 * run_cpu);  // a warm-up may cost up to two runs
    const double bound = std::max(0.2, S.untimed_work_fraction * run_cpu);
    const double device_bound = std::max(0.05, S.untimed_work_fraction * cstats.median);
    const double total = gaps_cpu + foreign_in_baseline + warmup_excess;
    untimed = {{"cpu_s", total},
               {"bound_s", bound},
               {"between_runs_cpu_s", gaps_cpu},
               {"other_threads_in_baseline_runs_cpu_s", foreign_in_baseline},
               {"warmup_cpu_s", warmup_cpu},
               {"warmup_excess_cpu_s", warmup_excess},
               {"timed_run_cpu_s", run_cpu},
               {"device_queued_at_window_start_s", queued_device_s},
               {"device_bound_s", device_bound},
               {"threads",
                {{"reference", threads_reference}, {"harness_threads", mon.adopted_threads()}, {"allowance", allowance},
                 {"most_extra", worst_extra}, {"census", thread_census}}}};
    if (worst_extra > allowance)
      untimed_problems.push_back("the candidate left " + std::to_string(worst_extra - allowance) +
                                 " thread(s) running beyond the harness's own after its runs (" + std::to_string(threads_reference) +
                                 " after the baseline's warm-up, " + std::to_string(threads_reference + worst_extra) + " after '" +
                                 worst_after + "'): work outside the timed windows");
    if (total > bound)
      untimed_problems.push_back("untimed work: " + num(total) + " s of CPU time outside the candidate's timed runs (" +
                                 num(foreign_in_baseline) + " s by other threads during the baseline's runs, " + num(gaps_cpu) +
                                 " s between runs, " + num(warmup_excess) + " s of warm-up beyond two runs), bound " + num(bound) +
                                 " s (" + num(S.untimed_work_fraction, 2) + " of a timed run's " + num(run_cpu) + " s)");
    if (queued_device_s > device_bound)
      untimed_problems.push_back("untimed device work: " + num(queued_device_s) + " s of device work was still queued when timed windows began (bound " +
                                 num(device_bound) + " s)");
  }
  v.integrity["untimed_work"] = untimed;
  json drawn = json::array();
  for (size_t i : pair_cand) drawn.push_back({{"prompt", windows[i].out.prompt.id}, {"seed", windows[i].out.seed}});
  v.integrity["drawn_in_timed_window"] = drawn;

  // ---- The baseline against the machine: its denoising efficiency against the calibration, and its
  // times against the records of earlier runs here. A slowed baseline is an error of the run.
  const auto& tc = w.pipeline().transformer()->config();
  const auto& vc = w.pipeline().vae()->config();
  const int64_t latent_T = (base.config.frames - 1) / vc.scale_factor_temporal + 1;
  const auto fl = runtime::transformer_flops(tc, 1, latent_T, base.config.height / vc.scale_factor_spatial,
                                             base.config.width / vc.scale_factor_spatial, w.pipeline().max_text_length, true);
  const int64_t N = base.config.steps * branches_of(base.config);  // forwards the baseline runs
  // The fastest the machine was seen to be (for the floors below which a time is impossible).
  Calibration cal = base_cals.front();
  double cal_seconds = 0;
  for (const auto& c : base_cals) {
    cal.matmul_tflops = std::max(cal.matmul_tflops, c.matmul_tflops);
    cal.attention_tflops = std::max(cal.attention_tflops, c.attention_tflops);
    cal_seconds += c.seconds;
  }
  auto forward_seconds = [&](const Calibration& c) {
    return (fl.linear + fl.time_embedding) / (c.matmul_tflops * 1e12) + fl.attention / (c.attention_tflops * 1e12);
  };
  const double forward_floor_s = forward_seconds(cal);
  std::vector<double> base_denoise, base_text, base_decode, cand_denoise, cand_text, cand_decode;
  for (size_t i : pair_base) {
    base_denoise.push_back(windows[i].out.times.denoising);
    base_text.push_back(windows[i].out.times.text_encoding);
    base_decode.push_back(windows[i].out.times.decoding);
  }
  base_denoise.push_back(off_base.times.denoising);
  for (size_t i : pair_cand) {
    cand_denoise.push_back(windows[i].out.times.denoising);
    cand_text.push_back(windows[i].out.times.text_encoding);
    cand_decode.push_back(windows[i].out.times.decoding);
  }
  const double base_denoise_s = median_of(base_denoise);
  // The baseline's efficiency: the time its forwards need at the calibrated rates over the time a run
  // took, on two clocks. Wall: the wall time of its denoising against the rates per second. CPU (on the
  // CPU only): the CPU time of the harness's threads over the whole run against the rates per CPU second.
  // Other processes on a shared machine stretch the wall clock of a run (not its CPU time); another
  // process on the same core's other hardware thread slows a CPU second (the wall clock less so); a
  // slowed baseline is slower on both. Noise only ever adds time, so each side is its best: the fastest
  // calibration round of the gate and the fastest baseline run (a slowed baseline is slow in every run).
  const bool cpu_clock = !dev.is_cuda();
  std::vector<size_t> base_windows = pair_base;
  base_windows.push_back(check_i);
  Calibration cpu_cal = cal;
  cpu_cal.matmul_tflops = cpu_cal.attention_tflops = 0;
  for (const auto& c : base_cals) {
    cpu_cal.matmul_tflops = std::max(cpu_cal.matmul_tflops, c.matmul_tflops_per_cpu_s);
    cpu_cal.attention_tflops = std::max(cpu_cal.attention_tflops, c.attention_tflops_per_cpu_s);
  }
  std::vector<double> effs_wall, effs_cpu;
  for (size_t k : base_windows) {
    const Window& bw = windows[k];
    const double wall = bw.out.times.denoising, cpu = bw.after.own_cpu_s - bw.before.own_cpu_s;
    effs_wall.push_back(wall > 0 ? N * forward_seconds(cal) / wall : 0.0);
    effs_cpu.push_back(cpu > 0 ? N * forward_seconds(cpu_cal) / cpu : 0.0);
  }
  const std::vector<std::string> clocks = cpu_clock ? std::vector<std::string>{"wall", "cpu"} : std::vector<std::string>{"wall"};
  std::map<std::string, double> eff, eff_noise;
  eff["wall"] = *std::max_element(effs_wall.begin(), effs_wall.end());
  eff["cpu"] = *std::max_element(effs_cpu.begin(), effs_cpu.end());
  eff_noise["wall"] = robust_noise(effs_wall);
  eff_noise["cpu"] = robust_noise(effs_cpu);
  double efficiency = 0;  // the more favourable clock's
  for (const auto& c : clocks) efficiency = std::max(efficiency, eff[c]);
  {
    double floor = S.min_baseline_efficiency;
    // Defaults well below what an honest baseline reaches (docs/gate-defences.md): wan22-tiny on the CPU
    // 0.3-0.5 of its calibration (small, overhead-bound shapes), the 5B forward on an H200 57% of the
    // matmul peak; on a GPU the tiny model is all launch overhead, so no useful floor there.
    if (floor < 0) floor = base.model == "wan22-tiny" ? (dev.is_cuda() ? 0.0 : 0.05) : (dev.is_cuda() ? 0.25 : 0.05);
    const std::string records_path = !S.records_path.empty() ? S.records_path
                                                             : (cache.parent_path() / "baseline-records.json").string();
    BaselineRecords records(records_path);
    json identity = machine_identity();
    identity["model"] = base.model;
    identity["weights_hash"] = env["weights_hash"];
    identity["device"] = env["device"];
    identity["device_name"] = env["device_name"];
    identity["dtype"] = env["dtype"];
    identity["cpu_threads"] = base_threads;
    identity["config"] = to_json(base.config);
    identity["baseline_hash"] = v.baseline_hash;
    const std::string key = sha256_hex(identity.dump()).substr(0, 24);
    json entry = {{"build", build},
                  {"when", base::utc_timestamp()},
                  {"manifest", cand.id},
                  {"denoise_s", base_denoise_s},
                  {"total_s", bstats.median},
                  {"text_s", median_of(base_text)},
                  {"decode_s", median_of(base_decode)},
                  {"spread", bstats.spread()},
                  {"efficiency", json::object()},
                  {"noise", json::object()},
                  {"matmul_tflops", cal.matmul_tflops},
                  {"attention_tflops", cal.attention_tflops}};
    for (const auto& c : clocks) {
      entry["efficiency"][c] = eff[c];
      entry["noise"][c] = eff_noise[c];
    }
    json record_check = {{"path", records_path}, {"key", key}};
    std::vector<json> same_build, other_builds;
    for (auto& e : records.entries(key)) (e.value("build", "") == build ? same_build : other_builds).push_back(e);
    // Against the records, clock by clock, with the tolerance the noise allows; the baseline is slower
    // only when every clock says so.
    auto compare = [&](const std::vector<json>& ref, double min_tol, const char* which) -> std::string {
      double slow = 1e9;
      std::string detail;
      json shown = json::object();
      for (const auto& c : clocks) {
        std::vector<double> effs, noises = {eff_noise[c]};
        for (const auto& e : ref) {
          if (!e.contains("efficiency") || !e["efficiency"].is_object() || !e["efficiency"].contains(c)) continue;
          effs.push_back(e["efficiency"].value(c, 0.0));
          noises.push_back(e.contains("noise") && e["noise"].is_object() ? e["noise"].value(c, 0.0) : 0.0);
        }
        if (effs.empty()) return "";
        // The noise: the typical robust spread of the efficiency over one gate's baseline runs (here and
        // recorded), and how much the recorded gates differ among themselves.
        const double ref_eff = median_of(effs);
        // Few records say little about how far this machine's load moves the efficiency (an honest
        // baseline on a shared 2-core machine was seen 44-47% below a single earlier gate's on both
        // clocks): until 5 records exist, only half the recorded efficiency or less is refused (the
        // sandbag switch's is a quarter).
        const double few = effs.size() < 5 ? 1.0 : 0.0;
        const double tol = std::max({min_tol, few, 3.0 * std::max(median_of(noises), robust_noise(effs))});
        const double slow_c = eff[c] > 0 ? ref_eff / eff[c] - 1.0 : 1e9;
        shown[c] = {{"entries", effs.size()}, {"recorded", ref_eff}, {"now", eff[c]}, {"slower_by", slow_c}, {"tolerance", tol}};
        slow = std::min(slow, slow_c - tol);
        detail += std::string(detail.empty() ? "" : "; ") + c + " clock: efficiency " + num(eff[c], 4) + " against " +
                  num(ref_eff, 4) + " recorded, " + num(100 * slow_c, 0) + "% slower, tolerance " + num(100 * tol, 0) + "%";
      }
      record_check[which] = shown;
      if (slow > 0)
        return std::string("the baseline is slower than the records of ") + which + " allow (" + detail + "; denoising " +
               num(base_denoise_s) + " s)";
      return "";
    };
    std::string problem;
    if (floor > 0 && efficiency < floor)
      problem = "the baseline's efficiency is " + num(efficiency, 4) + " of the throughput calibrated next to its runs (wall " +
                num(eff["wall"], 4) + (cpu_clock ? ", CPU " + num(eff["cpu"], 4) : std::string()) +
                "), below the floor " + num(floor, 4) + ": denoising took " + num(base_denoise_s) + " s where its " +
                std::to_string(N) + " forwards need " + num(N * forward_floor_s) + " s at the calibrated rates";
    if (problem.empty()) problem = compare(same_build, S.baseline_record_tolerance, "this build");
    if (problem.empty()) problem = compare(other_builds, 2 * S.baseline_record_tolerance, "other builds of this flavour");
    const bool trusted = problem.empty() && untimed_problems.empty();
    record_check["recorded"] = trusted;
    json runs = {{"wall", effs_wall}};
    if (cpu_clock) runs["cpu"] = effs_cpu;
    v.integrity["baseline_speed"] = {{"efficiency", efficiency},
                                     {"efficiency_by_clock", entry["efficiency"]},
                                     {"efficiency_runs", runs},
                                     {"floor", floor},
                                     {"denoise_s", base_denoise_s},
                                     {"forwards", N},
                                     {"forward_floor_s", forward_floor_s},
                                     {"calibration",
                                      {{"matmul_tflops", cal.matmul_tflops}, {"attention_tflops", cal.attention_tflops},
                                       {"matmul_tflops_per_cpu_s", cpu_cal.matmul_tflops},
                                       {"attention_tflops_per_cpu_s", cpu_cal.attention_tflops},
                                       {"tokens", cal.tokens}, {"dim", cal.dim}, {"heads", cal.heads},
                                       {"runs", base_cals.size()}, {"seconds", cal_seconds}}},
                                     {"records", record_check}};
    // A candidate that worked outside its windows slowed the baseline's runs itself: its verdict says so
    // (authenticity) and the baseline is neither judged nor recorded from this gate.
    if (!problem.empty() && untimed_problems.empty()) {
      write_json(out / "baseline.json", v.integrity);
      throw BaselineError(problem + " -- a slowed baseline is an error of the run, not a speedup (" + out.string() + "/baseline.json)");
    }
    if (trusted) records.append(key, identity, entry);
  }

  // ---- Clips: the split at the official seed, then the timed pairs (fresh prompts and seeds).
  std::vector<Clip> clips;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Clip c;
    c.name = prompts[i].id;
    c.cand = &windows[split_cand[i]].out;
    c.cand8 = runtime::frames_from_tensor(c.cand->video);
    c.base8 = split_base8[i];
    clips.push_back(std::move(c));
  }
  for (size_t k = 0; k < pair_cand.size(); ++k) {
    Clip c;
    const RunOutput& co = windows[pair_cand[k]].out;
    c.name = "pair" + std::to_string(k) + ":" + co.prompt.id + "@" + std::to_string(co.seed);
    c.pair = true;
    c.cand = &co;
    c.cand8 = runtime::frames_from_tensor(co.video);
    c.base8 = runtime::frames_from_tensor(windows[pair_base[k]].out.video);
    clips.push_back(std::move(c));
  }

  // --- 1. artifacts: every run finished, wrote finite pixels, and every file is there and valid.
  {
    GateCheck g{"artifacts", true, "", json::object()};
    std::vector<std::string> problems;
    const std::string ext = video_ext();
    for (auto& c : clips) {
      if (!c.cand->error.empty()) problems.push_back(c.name + ": run failed: " + c.cand->error);
      if (!finite(c.cand->video)) problems.push_back(c.name + ": output has NaN/Inf pixels (unwritten or broken output)");
      if (c.cand->unwritten_at_return)
        problems.push_back(c.name + ": the output was not complete when the run returned: written after the timed window");
      if (c.pair) continue;
      const fs::path vf = out / "videos" / (c.name + ext);
      try {
        runtime::write_video(vf.string(), c.cand8, cand.config.fps);
        const auto info = runtime::probe_video(vf.string());
        if (info.frames != cand.config.frames || info.width != cand.config.width || info.height != cand.config.height)
          problems.push_back(c.name + ": video has " + std::to_string(info.frames) + " frames of " +
                             std::to_string(info.width) + "x" + std::to_string(info.height) + ", expected " +
                             std::to_string(cand.config.frames) + " of " + std::to_string(cand.config.width) + "x" +
                             std::to_string(cand.config.height));
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
    }
    if (fs::exists(out / "videos" / (prompts[0].id + ext)))
      fs::copy_file(out / "videos" / (prompts[0].id + ext), out / ("video" + ext), fs::copy_options::overwrite_existing);
    if (!audit.error.empty()) problems.push_back("audit run failed: " + audit.error);
    else if (!finite(audit.video)) problems.push_back("audit run: output has NaN/Inf pixels (unwritten or broken output)");
    else if (audit.unwritten_at_return) problems.push_back("audit run: the output was not complete when the run returned");
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
  const RunOutput& first_pair = windows[pair_cand[0]].out;
  {
    GateCheck g{"performance", true, "", json::object()};
    const auto flc = runtime::transformer_flops(tc, 1, (cand.config.frames - 1) / vc.scale_factor_temporal + 1,
                                                cand.config.height / vc.scale_factor_spatial,
                                                cand.config.width / vc.scale_factor_spatial, w.pipeline().max_text_length, false);
    const double forwards = first_pair.trace.get("transformer.forwards");
    const double peak = std::max(w.peak_tflops(), cal.matmul_tflops);
    // The floor counts only the GEMMs of the forwards that really ran: attention may be sparse.
    const double floor_s = forwards * flc.linear / (peak * 1e12);
    g.details = {{"baseline", bstats.to_json()}, {"candidate", cstats.to_json()}, {"noise", noise}, {"margin", margin},
                 {"speedup", v.speedup}, {"floor_s", floor_s}, {"peak_tflops", peak}, {"forwards", forwards},
                 {"audit_s", audit.seconds}, {"runs", timed_stages}};
    const double first = first_pair.seconds;
    const double audit_drop = first > 0 ? 1.0 - audit.seconds / first : 0.0;
    if (v.speedup < 1.0 + margin) {
      g.pass = false;
      g.reason = "not faster than the baseline beyond the noise: " + num(v.speedup, 3) + "x, needs > " +
                 num(1.0 + margin, 3) + "x";
    } else if (cstats.min < floor_s) {
      g.pass = false;
      g.reason = "a run took " + num(cstats.min, 3) + " s, below the physical floor of " + num(floor_s, 3) + " s";
    } else if (audit_drop > std::max(3 * margin, 0.25)) {
      g.pass = false;
      g.reason = "duplicate-prompt audit: the same prompt cost " + num(first, 3) + " s then " +
                 num(audit.seconds, 3) + " s (caching across requests)";
    } else if (!same_frames(runtime::frames_from_tensor(audit.video), clips[prompts.size()].cand8)) {
      g.pass = false;
      g.reason = "duplicate-prompt audit: the same prompt gave a different clip the second time";
    } else {
      g.reason = num(v.speedup, 3) + "x faster (noise " + num(noise, 3) + ")";
    }
    v.checks.push_back(g);
  }

  // --- 4. off identity: flags off reproduces the baseline's output and time.
  {
    GateCheck g{"off_identity", true, "", json::object()};
    const auto off8 = runtime::frames_from_tensor(off_run.video);
    const auto& ref8 = split_base8[0];
    double psnr_off = kPsnrCap;
    bool same = off_run.error.empty() && finite(off_run.video) && same_frames(off8, ref8);
    // Another configuration (a lower resolution) cannot be compared: official_config rejects it, and the off
    // run differs from the baseline's by its size, not by a crash of the comparison (issue 38).
    const bool comparable = same_shape(off8, ref8);
    if (!same && off_run.error.empty() && comparable) psnr_off = compare_clips(off8, ref8).psnr_min;
    if (!comparable) psnr_off = 0;
    const double ratio = bstats.median > 0 ? off_run.seconds / bstats.median : 0.0;
    const double tol = std::max(2 * noise, S.off_time_tolerance);
    g.details = {{"bit_identical", same}, {"psnr_min", psnr_off}, {"off_seconds", off_run.seconds}, {"time_ratio", ratio},
                 {"time_tolerance", tol}, {"off_manifest", to_json(off)}};
    if (!off_run.error.empty()) {
      g.pass = false;
      g.reason = "the off run failed: " + off_run.error;
    } else if (!same && (S.exact_off_identity || psnr_off < S.lossless_psnr)) {
      g.pass = false;
      g.reason = "with the technique's flags off the output differs from the baseline's (PSNR " + num(psnr_off, 2) + " dB)";
    } else if (std::fabs(ratio - 1.0) > tol) {
      g.pass = false;
      g.reason = "with the flags off the time is " + num(ratio, 3) + "x the baseline's (tolerance " + num(tol, 3) + ")";
    } else {
      g.reason = same ? "flags off: bit-identical output, same time" : "flags off: output within tolerance, same time";
    }
    v.checks.push_back(g);
  }

  // --- 5. quantitative quality against the baseline's own output: the split at the official seed, and
  // each timed pair (an unannounced audit on a prompt/seed the baseline had not run in this process).
  json quality = json::object();
  std::vector<bool> identical(clips.size(), false);
  {
    GateCheck g{"quality", true, "", json::object()};
    double worst_psnr = kPsnrCap, worst_ssim = 1.0, worst_audit_psnr = kPsnrCap;
    std::string why;
    const double need_psnr = cand.lossless ? S.lossless_psnr : S.min_psnr;
    const double need_ssim = cand.lossless ? 0.999 : S.min_ssim;
    std::vector<size_t> short_of_need;  // split clips below need_psnr / need_ssim
    std::vector<std::pair<size_t, double>> audits;  // timed pairs' clips and their PSNR
    for (size_t k = 0; k < clips.size(); ++k) {
      const Clip& c = clips[k];
      if (!same_shape(c.cand8, c.base8)) {
        why = c.name + ": the clip's size differs from the baseline's (another config)";
        worst_psnr = worst_ssim = 0;
        quality[c.name] = {{"comparable", false}};
        continue;
      }
      identical[k] = same_frames(c.cand8, c.base8);
      const auto q = compare_clips(c.cand8, c.base8);
      json qj = gates::to_json(q);
      qj["bit_identical"] = identical[k];
      qj["audit"] = c.pair;
      quality[c.name] = qj;
      const double qp = std::isnan(q.psnr_mean) ? 0 : q.psnr_mean, qs = std::isnan(q.ssim_mean) ? 0 : q.ssim_mean;
      if (c.pair) {
        worst_audit_psnr = std::min(worst_audit_psnr, qp);
        audits.emplace_back(k, qp);
        continue;
      }
      worst_psnr = std::min(worst_psnr, qp);
      worst_ssim = std::min(worst_ssim, qs);
      if (qp < need_psnr || qs < need_ssim) short_of_need.push_back(k);
    }
    double need_audit_psnr = cand.lossless ? S.lossless_psnr : S.min_psnr - S.audit_psnr_slack;

    // A lossless claim the 50 dB rule does not confirm: each short clip against the precision control.
    std::string floor_why;  // why the floor does not hold ("" when it holds)
    json floor = nullptr;
    const bool try_floor = cand.lossless && S.precision_floor && why.empty() && !short_of_need.empty();
    if (try_floor) {
      const at::ScalarType base_dtype = runtime::compute_dtype(to_runtime_options(base).dtype, dev);
      const std::string up = base_dtype == at::kDouble ? "" : base_dtype == at::kFloat ? "fp64" : "fp32";
      floor = {{"control_dtype", up.empty() ? json(nullptr) : json(up)},
               {"psnr_slack_db", S.floor_psnr_slack},
               {"ssim_slack", S.floor_ssim_slack},
               {"clips", json::object()}};
      if (up.empty()) floor_why = "the baseline computes in float64: there is no precision above it to compare with";
      Manifest ctl = base;
      ctl.id = base.id + ".precision-" + up;
      ctl.kind = "control";
      ctl.base = base.id;
      ctl.lossless = false;
      ctl.flags["dtype"] = up;
      if (floor_why.empty()) ctl = parse_manifest(to_json(ctl), "the precision control of " + base.id);
      double worst_margin = kPsnrCap, sum_margin = 0, sum_ssim_margin = 0;
      int64_t judged = 0;
      bool control_failed = !floor_why.empty();
      for (size_t k : short_of_need) {
        if (control_failed) break;
        const Clip& c = clips[k];
        // The control's clip of this prompt, cached beside the baseline's (the same key: build, weights,
        // device, threads, baseline).
        const fs::path f = cdir / (prompts[k].id + "-" + std::to_string(base.config.seed) + "-control-" + up + ".safetensors");
        std::vector<cv::Mat> ctl8;
        if (auto cached = read_cached_clip(f)) {
          ctl8 = std::move(*cached);
        } else {
          tick(stage_label("precision_control"));
          const RunOutput r = w.run(ctl, prompts[k]);
          if (!r.error.empty() || !finite(r.video)) {
            floor_why = "the precision control (" + up + ") of " + c.name + " failed: " +
                        (r.error.empty() ? std::string("non-finite output") : r.error);
            control_failed = true;
            break;
          }
          ctl8 = runtime::frames_from_tensor(r.video);
          write_cached_clip(f, ctl8);
        }
        const auto bq = compare_clips(c.base8, ctl8), cq = compare_clips(c.cand8, ctl8);
        double margin = cq.psnr_mean - bq.psnr_mean, ssim_margin = cq.ssim_mean - bq.ssim_mean;
        if (std::isnan(margin) || std::isnan(ssim_margin)) margin = -kPsnrCap, ssim_margin = -1;
        const bool ok = margin >= -S.floor_clip_psnr_slack && ssim_margin >= -S.floor_clip_ssim_slack;
        floor["clips"][c.name] = {{"baseline_vs_control", gates::to_json(bq)},
                                  {"candidate_vs_control", gates::to_json(cq)},
                                  {"psnr_margin_db", margin},
                                  {"ssim_margin", ssim_margin},
                                  {"within_clip_slack", ok}};
        worst_margin = std::min(worst_margin, margin);
        sum_margin += margin;
        sum_ssim_margin += ssim_margin;
        ++judged;
        if (!ok && floor_why.empty())
          floor_why = c.name + ": " + num(cq.psnr_mean, 2) + " dB / SSIM " + num(cq.ssim_mean, 4) + " from the " + up +
                      " control, the baseline " + num(bq.psnr_mean, 2) + " dB / SSIM " + num(bq.ssim_mean, 4) +
                      " (a clip may fall " + num(S.floor_clip_psnr_slack, 2) + " dB, " + num(S.floor_clip_ssim_slack, 4) + " behind)";
      }
      const double mean_margin = judged ? sum_margin / judged : -kPsnrCap;
      const double mean_ssim_margin = judged ? sum_ssim_margin / judged : -1;
      if (floor_why.empty() && (mean_margin < -S.floor_psnr_slack || mean_ssim_margin < -S.floor_ssim_slack))
        floor_why = "on average over " + std::to_string(judged) + " clip(s) " + num(-mean_margin, 2) + " dB and SSIM " +
                    num(-mean_ssim_margin, 4) + " further from the " + up + " control than the baseline (slack " +
                    num(S.floor_psnr_slack, 2) + " dB, " + num(S.floor_ssim_slack, 4) + ")";
      floor["mean_psnr_margin_db"] = mean_margin;
      floor["mean_ssim_margin"] = mean_ssim_margin;
      floor["pass"] = floor_why.empty();
      floor["worst_psnr_margin_db"] = worst_margin;
      if (floor_why.empty()) need_audit_psnr = std::min(S.lossless_psnr, worst_psnr - S.audit_psnr_slack);
    }
    const bool by_floor = try_floor && floor_why.empty();
    std::string audit_why;
    for (const auto& [k, qp] : audits)
      if (qp < need_audit_psnr) {
        audit_why = "unannounced audit " + clips[k].name + ": PSNR " + num(qp, 2) +
                    " dB against the baseline's clip of that prompt and seed (needs " + num(need_audit_psnr, 2) + ")";
        break;
      }
    v.psnr = worst_psnr;
    v.ssim = worst_ssim;
    g.details = {{"worst_psnr", worst_psnr}, {"worst_ssim", worst_ssim}, {"min_psnr", need_psnr}, {"min_ssim", need_ssim},
                 {"worst_audit_psnr", worst_audit_psnr}, {"min_audit_psnr", need_audit_psnr}, {"lossless", cand.lossless}};
    if (try_floor) g.details["precision_floor"] = floor;
    const std::string shown = "worst PSNR " + num(worst_psnr, 2) + " dB, worst SSIM " + num(worst_ssim, 4);
    if (!why.empty()) {
      g.pass = false;
      g.reason = why;
    } else if (!short_of_need.empty() && !by_floor) {
      g.pass = false;
      g.reason = "quality below tolerance: worst PSNR " + num(worst_psnr, 2) + " dB (needs " + num(need_psnr, 2) +
                 "), worst SSIM " + num(worst_ssim, 4) + " (needs " + num(need_ssim, 4) + ")";
      if (try_floor) g.reason += "; nor within the precision floor: " + floor_why;
    } else if (!audit_why.empty()) {
      g.pass = false;
      g.reason = audit_why;
    } else if (by_floor) {
      g.reason = shown + ": below the " + num(need_psnr, 0) + " dB of a lossless claim, but its clips are as close to the " +
                 floor["control_dtype"].get<std::string>() + " control as the baseline's (mean margin " +
                 num(floor["mean_psnr_margin_db"].get<double>(), 2) + " dB, worst " +
                 num(floor["worst_psnr_margin_db"].get<double>(), 2) + " dB): lossless within the baseline's rounding";
    } else {
      g.reason = shown;
    }
    v.checks.push_back(g);
  }

  // --- 6. visual check: no artifact the baseline does not have, and (procedural scenes) the object the
  // baseline shows, with its colour and motion.
  json visual = json::object();
  {
    GateCheck g{"visual", true, "", json::object()};
    std::vector<std::string> found, lost;
    int64_t compared = 0;  // clips whose baseline shows a single object
    const bool objects = S.object_check > 0 || (S.object_check < 0 && cand.model == "wan22-tiny");
    for (const auto& c : clips) {
      if (c.cand8.size() != c.base8.size()) continue;  // the quality gate says why
      const auto cr = visual_report(runtime::float_frames_from_tensor(c.cand->video));
      const auto br = visual_report(c.base8);
      visual[c.name] = {{"candidate", gates::to_json(cr)}, {"baseline", gates::to_json(br)}};
      for (const auto& reason : new_artifacts(cr, br)) found.push_back(c.name + ": " + reason);
      if (objects && !c.cand8.empty() && same_shape(c.cand8, c.base8)) {
        const auto ct = detect_object_track(c.cand8), bt = detect_object_track(c.base8);
        visual[c.name]["object"] = {{"candidate", gates::to_json(ct)}, {"baseline", gates::to_json(bt)}};
        compared += single_object(bt);
        for (const auto& reason : lost_semantics(ct, bt)) lost.push_back(c.name + ": " + reason);
      }
    }
    g.pass = found.empty() && lost.empty();
    g.reason = g.pass ? (compared > 0 ? "no artifact beyond the baseline's; the object keeps the baseline's colour and motion in " +
                                            std::to_string(compared) + " of " + std::to_string(clips.size()) + " clips"
                                      : "no artifact beyond the baseline's")
                      : (found.empty() ? lost : found).front();
    g.details["new_artifacts"] = found;
    if (objects) {
      g.details["semantics_lost"] = lost;
      g.details["objects_compared"] = compared;  // 0 where the baseline shows no single object (random weights)
    }
    v.checks.push_back(g);
  }

  // --- authenticity: the technique engaged as its flags say, did the work its counters claim and no
  // more than its timed runs show, and nothing it returned was the baseline's own output.
  {
    GateCheck g{"authenticity", true, "", json::object()};
    const auto techs = technique_flags_set(cand);
    const auto opts = to_runtime_options(cand);
    const int64_t branches = branches_of(cand.config);
    const int64_t cand_N = cand.config.steps * branches;
    // Timing comparisons within this gate: generous, as a run or two can be disturbed by the machine
    // (but a candidate 4x faster where it should not be is caught however noisy the machine is).
    const double tol = std::max(0.5, 3 * noise);
    std::vector<std::string> problems;
    json work = json::array();

    const int64_t L = tc.num_layers;
    auto sum = [](const std::vector<int64_t>& v) {
      double s = 0;
      for (int64_t x : v) s += static_cast<double>(x);
      return s;
    };
    // (a) Replayed output: a run that claims (or shows) skipped work yet made the baseline's clip bit for bit.
    for (size_t k = 0; k < clips.size(); ++k) {
      const auto& t = clips[k].cand->trace;
      const double ran = t.get("transformer.forwards");
      const double density = t.has("sparse.attention.density") ? t.get("sparse.attention.density") : 1.0;
      const double blocks = sum(clips[k].cand->times.step_blocks);
      const bool claims_skips = (ran < cand_N) || t.get("cache.skipped_forwards") > 0 ||
                                t.get("cache.easycache.skipped_forwards") > 0 || density < 1.0 ||
                                blocks < static_cast<double>(cand_N * L);
      if (claims_skips && identical[k])
        problems.push_back(clips[k].name + ": claims to have skipped work (" + num(ran, 0) + " of " + std::to_string(cand_N) +
                           " forwards run, " + num(blocks, 0) + " of " + std::to_string(cand_N * L) + " blocks, attention density " +
                           num(density, 3) +
                           ") yet its clip is bit-identical to the baseline's: skipped work cannot be that exact (the baseline's output replayed, or the counters inflated)");
    }
    // (b) Faster on prompts/seeds whose baseline output exists (the split at the official seed: cached, or
    // made earlier in this process) than on the fresh ones drawn inside the timed windows.
    {
      const double factor = std::max(0.25, 1.0 - tol);
      double fresh = cstats.median, seen = median_of(cand_split_times);
      json seen_check = {{"fresh_s", fresh}, {"seen_s", seen}, {"factor", factor}};
      bool flagged = fresh > 0 && seen < fresh * factor;
      if (recheck) {  // the adjacent pair decides (see above)
        const double f2 = windows[recheck->first].out.seconds, s2 = windows[recheck->second].out.seconds;
        seen_check["recheck"] = {{"fresh_s", f2}, {"seen_s", s2}};
        flagged = f2 > 0 && s2 < f2 * factor;
        if (flagged) {
          seen = s2;
          fresh = f2;
        }
      }
      v.integrity["seen_vs_fresh"] = seen_check;
      if (flagged)
        problems.push_back("the candidate is faster on prompts/seeds whose baseline output already exists (" + num(seen) +
                           " s at the official seed) than on fresh ones drawn inside the timed window (" + num(fresh) +
                           " s): it depends on the baseline's outputs");
    }
    // (c) Work outside the timed windows.
    for (const auto& p : untimed_problems) problems.push_back(p);
    // (d) Counters against measured work, per run.
    const double layers = static_cast<double>(tc.num_layers);
    const double cand_linear_floor_s =
        runtime::transformer_flops(tc, 1, (cand.config.frames - 1) / vc.scale_factor_temporal + 1,
                                   cand.config.height / vc.scale_factor_spatial, cand.config.width / vc.scale_factor_spatial,
                                   w.pipeline().max_text_length, false)
            .linear /
        (cal.matmul_tflops * 1e12);
    const double tokens = static_cast<double>(cal.tokens);
    struct Bound {
      const char* key;
      double per_forward;
    };
    const Bound bounds[] = {{"kernel.fused_qkv.launches", 2 * layers},       {"kernel.cross_kv_cache.hits", 2 * layers},
                            {"kernel.cuda_graph.replays", layers + 1},   {"kernel.timestep_dedup.rows_saved", tokens},
                            {"kernel.rope_cache.hits", 1},               {"sparse.attention.calls", 2 * layers}};
    // Each cache policy's declared dense work, from the registry (the policies' own declarations); the
    // same for every clip.
    struct CacheFloor {
      std::string name;
      int64_t warmup;
      bool dense_last;
    };
    std::vector<CacheFloor> caches;
    runtime::RuntimeOptions declared = opts;  // the accessor hands out a reference to its field
    for (const auto& t : runtime::techniques::all())
      if (t.warmup_steps && t.on(opts)) caches.push_back({t.name, t.warmup_steps(declared), t.dense_last_step && t.dense_last_step(opts)});
    std::vector<std::string> counter_problems, floor_problems;
    for (const auto& c : clips) {
      const auto& r = *c.cand;
      const auto& t = r.trace;
      const double claimed = t.get("transformer.forwards");
      double looped = 0;
      for (int64_t f : r.times.step_forwards) looped += static_cast<double>(f);
      const double blocks = sum(r.times.step_blocks), sparse_run = sum(r.times.step_sparse_attention);
      work.push_back({{"clip", c.name}, {"forwards_claimed", claimed}, {"forwards_looped", looped}, {"blocks_run", blocks},
                      {"text_tokens_run", r.times.text_tokens},
                      {"sparse_attention_run", sparse_run}, {"denoise_s", r.times.denoising},
                      {"step_forwards", r.times.step_forwards}, {"step_blocks", r.times.step_blocks}});
      if (claimed != looped)
        counter_problems.push_back(c.name + ": the trace claims " + num(claimed, 0) + " transformer forwards, the denoising loop ran " +
                                   num(looped, 0));
      // Claimed skips must be backed by missing work: a skipped forward is one the loop did not run, or
      // one whose block stack ran at least one block fewer (counted where the blocks run).
      const double claimed_skips = std::max(t.get("cache.skipped_forwards"), t.get("cache.easycache.skipped_forwards"));
      const double missing = std::max(0.0, static_cast<double>(cand_N) - looped) + std::max(0.0, looped * L - blocks);
      if (claimed_skips > missing + 1e-9)
        counter_problems.push_back(c.name + ": the cache claims " + num(claimed_skips, 0) + " skipped forwards, but only " + num(missing, 0) +
                                   " forwards' or blocks' work is missing from what the loop ran (" + num(looped, 0) + " forwards, " +
                                   num(blocks, 0) + " blocks)");
      // Sparse attention calls claimed against those the model code took the sparse path for (a pattern
      // whose window covers every token counts its call as dense: fewer, never more).
      if (t.get("sparse.attention.calls") > sparse_run)
        counter_problems.push_back(c.name + ": the trace claims " + num(t.get("sparse.attention.calls"), 0) +
                                   " sparse attention calls, the model took the sparse path " + num(sparse_run, 0) + " times");
      // The text encoder's work, counted where it runs: every prompt's max_text_length token rows, fewer by
      // exactly what text_trim says it saved. Embeddings made outside the timed run leave rows missing (with
      // text_trim on, the timing check of the text encoding below is off: this is what holds it then).
      const double text_expected = static_cast<double>(branches_of(cand.config) * w.pipeline().max_text_length);
      const double text_run = static_cast<double>(r.times.text_tokens), text_saved = t.get("kernel.text_trim.tokens_saved");
      if (text_run + text_saved != text_expected)
        counter_problems.push_back(c.name + ": the text encoder ran " + num(text_run, 0) + " token rows and text_trim claims " +
                                   num(text_saved, 0) + " saved, where the prompts have " + num(text_expected, 0) +
                                   ": text encoding outside the timed run?");
      if (!dev.is_cuda() && (t.get("kernel.cuda_graph.replays") > 0 || t.get("kernel.cuda_graph.captures") > 0))
        counter_problems.push_back(c.name + ": claims " + num(t.get("kernel.cuda_graph.replays"), 0) +
                                   " CUDA-graph replays on a CPU device, where no graph can be captured");
      for (const auto& b : bounds)
        if (t.get(b.key) > b.per_forward * std::max(claimed, looped) + 1e-9)
          counter_problems.push_back(c.name + ": " + b.key + " = " + num(t.get(b.key), 0) + " is more than " +
                                     num(b.per_forward, 0) + " per forward run allows (" + num(std::max(claimed, looped), 0) + " forwards)");
      // Claimed skips must show in the time: a skipped forward may cost up to 40% of a computed one (the
      // cache's bookkeeping and the loop's own work), no more.
      if (claimed < cand_N && claimed > 0 && base_denoise_s > 0) {
        const double share = claimed / static_cast<double>(cand_N);
        const double expect = base_denoise_s * (share + 0.4 * (1.0 - share));
        if (r.times.denoising > expect * (1.0 + 0.5 * tol) + 0.05 * base_denoise_s)
          counter_problems.push_back(c.name + ": claims " + num(claimed, 0) + " of " + std::to_string(cand_N) +
                                     " forwards, but its denoising took " + num(r.times.denoising) + " s, as long as " +
                                     num(cand_N * r.times.denoising / base_denoise_s, 0) +
                                     " of the baseline's forwards (measured time contradicts the counters)");
      }
      // The physical floor of the forwards it ran: their GEMMs at twice the calibrated matmul rate.
      if (looped > 0 && r.times.denoising < looped * cand_linear_floor_s / 2.0)
        counter_problems.push_back(c.name + ": " + num(looped, 0) + " forwards in " + num(r.times.denoising) +
                                   " s is faster than the machine's calibrated throughput allows");
      // Work floors, from the loop's and the blocks' own counts: every candidate computes the first step in
      // full and a minimum share of the blocks; a cache its declared warm-up and last steps; sparse
      // attention its declared dense steps and layers.
      const auto& sf = r.times.step_forwards;
      const auto& sb = r.times.step_blocks;
      const auto& ss = r.times.step_sparse_attention;
      if (sf.empty() || sb.size() != sf.size() || ss.size() != sf.size()) {
        floor_problems.push_back(c.name + ": no denoising loop ran (the clip came from elsewhere)");
        continue;
      }
      const int64_t full_step = branches * L;
      if (sf.front() < branches || sb.front() < full_step)
        floor_problems.push_back(c.name + ": the first step ran " + std::to_string(sf.front()) + " of " + std::to_string(branches) +
                                 " forwards and " + std::to_string(sb.front()) + " of " + std::to_string(full_step) + " blocks");
      const double share = std::min(looped / static_cast<double>(cand_N), blocks / static_cast<double>(cand_N * L));
      if (share < S.min_forward_share)
        floor_problems.push_back(c.name + ": ran " + num(looped, 0) + " of " + std::to_string(cand_N) + " forwards and " + num(blocks, 0) +
                                 " of " + std::to_string(cand_N * L) + " blocks (" + num(100 * share, 1) + "%), below the work floor of " +
                                 num(100 * S.min_forward_share, 1) + "%");
      const auto n_steps = static_cast<int64_t>(sf.size());
      auto full = [&](int64_t s) { return sf[static_cast<size_t>(s)] >= branches && sb[static_cast<size_t>(s)] >= full_step; };
      auto ran_text = [&](int64_t s) {
        return std::to_string(sf[static_cast<size_t>(s)]) + " of " + std::to_string(branches) + " forwards and " +
               std::to_string(sb[static_cast<size_t>(s)]) + " of " + std::to_string(full_step) + " blocks";
      };
      for (const auto& cf : caches) {
        for (int64_t s = 0; s < std::min(cf.warmup, n_steps); ++s)
          if (!full(s)) {
            floor_problems.push_back(c.name + ": " + cf.name + " declares " + std::to_string(cf.warmup) +
                                     " warm-up steps computed in full, but step " + std::to_string(s) + " ran " + ran_text(s));
            break;
          }
        if (cf.dense_last && !full(n_steps - 1))
          floor_problems.push_back(c.name + ": " + cf.name + " declares a dense last step, which ran " + ran_text(n_steps - 1));
      }
      if (opts.sparse.pattern != "none") {
        const int64_t sparse_layers = std::max<int64_t>(0, L - opts.sparse.dense_layers);
        for (int64_t s = 0; s < n_steps; ++s) {
          const int64_t sp = ss[static_cast<size_t>(s)];
          const int64_t allowed = s < opts.sparse.dense_steps ? 0 : sf[static_cast<size_t>(s)] * sparse_layers;
          if (sp > allowed) {
            floor_problems.push_back(c.name + ": sparse attention declares dense_steps " + std::to_string(opts.sparse.dense_steps) +
                                     " and dense_layers " + std::to_string(opts.sparse.dense_layers) + ", but step " + std::to_string(s) +
                                     " ran " + std::to_string(sp) + " self-attention calls sparse where at most " +
                                     std::to_string(allowed) + " may be (the declared dense work was skipped)");
            break;
          }
        }
      }
    }
    for (const auto& p : counter_problems) problems.push_back(p);
    // (e) Stages no technique works on must not be faster than the baseline's: text encoding unless a text
    // switch is on, decoding unless a VAE switch is on (the registry's hooks say which techniques work where).
    {
      const bool decode_switches = runtime::techniques::works_on_decode(opts);
      const bool text_switches = runtime::techniques::works_on_text_encoding(opts);
      const double bt = median_of(base_text), ct = median_of(cand_text), bd = median_of(base_decode), cd = median_of(cand_decode);
      const double slack = 0.002 + 0.01 * bstats.median;
      if (!text_switches && ct < bt * std::max(0.25, 1.0 - tol) - slack)
        problems.push_back("text encoding took " + num(ct, 4) + " s against the baseline's " + num(bt, 4) +
                           " s, and no technique works on it: done before the timer?");
      if (!decode_switches && cd < bd * std::max(0.25, 1.0 - tol) - slack)
        problems.push_back("VAE decoding took " + num(cd, 4) + " s against the baseline's " + num(bd, 4) +
                           " s, and no technique works on it: done before the timer?");
    }
    for (const auto& p : floor_problems) problems.push_back(p);
    // (g) The denoising loop ran the manifest's steps: a technique that runs fewer, with honest counters,
    // leaves every other count consistent with what it did (docs/gate-defences.md, "fewer steps").
    for (const auto& c : clips) {
      const size_t ran = c.cand->times.step_seconds.size();
      if (ran != static_cast<size_t>(cand.config.steps))
        problems.push_back(c.name + ": the denoising loop ran " + std::to_string(ran) + " of the manifest's " +
                           std::to_string(cand.config.steps) + " steps");
    }
    // (f) Engagement: each switch that is on left its trace.
    for (const auto& c : clips) {
      for (const auto& p : runtime::engagement_problems(opts, c.cand->trace)) problems.push_back(c.name + ": " + p);
    }
    if (!techs.empty() && !cand.lossless && same_frames(clips[0].cand8, runtime::frames_from_tensor(off_run.video)))
      problems.push_back("a lossy technique whose output equals the off run's: it changed nothing");
    g.details = {{"technique_flags", techs}, {"trace", clips[0].cand->trace.to_json()}, {"work", work}, {"untimed", untimed}};
    g.pass = problems.empty();
    g.reason = g.pass ? (techs.empty() ? "no technique flags (baseline or control)" : "engaged: counters consistent with the flags and the measured work")
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
    // A clip that lost the baseline's object, colour or motion and has no artifact: its own signature.
    if (const auto* c = v.check("visual"); v.failure_signature == "visual-artifact" && c &&
                                            c->details.value("new_artifacts", json::array()).empty())
      v.failure_signature = "semantic-loss";
  }

  // Fixed-name artifacts. clips.json: each judged clip's identity (its 8-bit frames' SHA-256) and the
  // baseline's at the same prompt and seed: what `generate --manifest` must reproduce (docs/deploy.md).
  json clip_ids = json::object();
  for (const auto& c : clips)
    if (!c.pair)
      clip_ids[c.name] = {{"seed", c.cand->seed}, {"frames_sha256", frames_sha256(c.cand8)},
                          {"baseline_frames_sha256", frames_sha256(c.base8)}, {"seconds", c.cand->seconds},
                          {"video", "videos/" + c.name + video_ext()}};
  write_json(out / "clips.json", {{"manifest_hash", v.manifest_hash}, {"clips", clip_ids}});
  json trace = json::object();
  for (const auto& c : clips) trace[c.name] = c.cand->trace.to_json();
  write_json(out / "trace.json", trace);
  json bench = {{"baseline", bstats.to_json()}, {"candidate", cstats.to_json()},
                {"speedup", v.speedup}, {"noise", noise}, {"audit_s", audit.seconds}, {"off_s", off_run.seconds},
                {"stages", json::array()}};
  for (const auto& c : clips)
    bench["stages"].push_back({{"clip", c.name}, {"total_s", c.cand->seconds}, {"text_encoding_s", c.cand->times.text_encoding},
                               {"denoising_s", c.cand->times.denoising}, {"decoding_s", c.cand->times.decoding}});
  write_json(out / "benchmark.json", bench);
  write_json(out / "quality.json", {{"clips", quality}, {"visual", visual}, {"worst_psnr", v.psnr}, {"worst_ssim", v.ssim}});
  // The artifacts gate also checks that the files it relies on parse back.
  for (const char* f : {"trace.json", "benchmark.json", "quality.json", "manifest.json", "metadata.json", "clips.json"}) {
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
    json row = ledger_row(v);
    row["clocks"] = meta["clocks"];
    row["seed"] = cand.config.seed;
    row["out_dir"] = out.string();
    row["family"] = cand.family;
    row["kind"] = cand.kind;
    row["model"] = w.model();
    ledger->append(row);
  }
  return v;
}

}  // namespace autooptim::gates
