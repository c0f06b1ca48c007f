#include "gates/gate_run.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "base/strings.h"
#include "gates/baseline_error.h"
#include "gates/checks/quality.h"
#include "gates/clip_frames.h"
#include "gates/gate_baseline_cache.h"
#include "gates/gate_baseline_speed.h"
#include "gates/gate_plan.h"
#include "gates/integrity.h"
#include "gates/metrics.h"
#include "gates/robust_stats.h"
#include "runtime/flops.h"
#include "runtime/models.h"
#include "runtime/techniques/engagement.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::gates {
namespace {

// The progress line's words for a window's role.
const char* stage_label(const std::string& role) {
  static const std::map<std::string, const char*> labels = {
      {"warmup_baseline", "warm-up baseline"},    {"warmup_candidate", "warm-up candidate"},
      {"candidate", "timed candidate"},           {"baseline", "timed baseline"},
      {"candidate_split", "candidate output"},    {"audit", "duplicate-prompt audit"},
      {"baseline_check", "off run: baseline"},    {"off", "off run: flags off"},
      {"baseline_split", "baseline output"},      {"recheck_fresh", "recheck: fresh draw"},
      {"recheck_seen", "recheck: official seed"}, {"precision_control", "precision control"}};
  const auto it = labels.find(role);
  return it == labels.end() ? "run" : it->second;
}

int64_t branches_of(const RunConfig& c) { return c.guidance > 1.0 ? 2 : 1; }

std::vector<double> seconds_of(const GateSequence& seq, const std::vector<size_t>& at,
                               double (*pick)(const RunOutput&)) {
  std::vector<double> v;
  for (size_t i : at) v.push_back(pick(seq.windows[i].out));
  return v;
}

double total_seconds(const RunOutput& r) { return r.seconds; }

// The relative range of the runs at these windows.
double spread_of(const GateSequence& seq, const std::vector<size_t>& at) {
  return runtime::TimingStats::of(seconds_of(seq, at, total_seconds)).spread();
}

// The pairs' side of the timing: the baseline's runs (the pairs', and the check's where it ran) against the
// candidate's timed runs.
// Where one pair was enough (GateSettings::pairs_from_history), the noise is what the worker's earlier gates
// measured.
void time_the_pairs(const GateSequence& seq, std::vector<double> base_times, GateTiming& t) {
  t.baseline = runtime::TimingStats::of(std::move(base_times));
  t.candidate = runtime::TimingStats::of(seconds_of(seq, seq.pair_candidate, total_seconds));
  t.speedup = t.candidate.median > 0 ? t.baseline.median / t.candidate.median : 0.0;
  t.noise = std::max({t.baseline.spread(), t.candidate.spread(), seq.history_noise});
}

// The baseline's timed runs: the pairs', and a spot-check's where it ran beside two pairs or more (beside one,
// the median of the two could exceed the pair's run, which the certain-slowdown rule takes as the most).
std::vector<size_t> baseline_timed_runs(const GateSequence& seq) {
  std::vector<size_t> runs = seq.pair_baseline;
  if (seq.baseline_check && runs.size() >= 2) runs.push_back(*seq.baseline_check);
  return runs;
}

// The sequence of generations. Every one is a window with the process sampled around it.
class GateRunner {
 public:
  GateRunner(Worker& w, GenerationSide& cand_side, GenerationSide& base_side, const Manifest& cand,
             const Manifest& base, const std::vector<Prompt>& prompts, const GateSettings& S,
             GateProgressCounter& progress)
      : w_(w),
        cand_side_(cand_side),
        base_side_(base_side),
        cand_(cand),
        base_(base),
        prompts_(prompts),
        S_(S),
        progress_(progress),
        base_hash_(manifest_hash(base)),
        is_baseline_(manifest_hash(cand) == base_hash_) {}

  void warm_up();
  double derived_run_timeout_s() const;
  void timed_pairs();
  // Each returns true when the verdict became certain (GateSettings::stop_early), with why in `ev`.
  bool stop_after_pairs(GateEvidence& ev) const;
  bool split(const BaselineClipCache& cache, GateEvidence& ev);
  void off_run(const BaselineClipCache& cache);
  void audit();
  void baseline_split(const BaselineClipCache& cache, json& cache_check);
  void recheck_if_disagreeing();
  GateSequence& sequence() { return seq_; }
  std::vector<std::vector<cv::Mat>>& split_base8() { return split_base8_; }
  int harness_threads() const { return mon_.adopted_threads(); }

 private:
  const RunOutput& window(const std::string& role, bool candidate_code, const std::function<RunOutput()>& fn);
  const RunOutput& baseline_window(const std::string& role, const std::function<RunOutput()>& fn);
  // Before pair `made` + 1: enough pairs already (at least settings.min_timing_repeats, both sides quiet; or
  // one, where the worker's earlier gates vouch for the machine's noise).
  bool quiet_enough(int64_t made);
  bool history_vouches();
  void split_measures_the_noise();
  // After the pairs: why the performance check must fail whatever follows ("" when it may pass).
  std::string certain_slowdown() const;
  // After the first timed pair: a switch that is on and left no trace fails authenticity ("" when none).
  std::string certain_disengagement() const;
  // After split clip k: below the claim's quality against a cached output this process verified ("" else).
  std::string certain_quality_failure_of(size_t k, const BaselineClipCache& cache, json& seen) const;
  // A cached clip held against a fresh run of the baseline: it must be what the baseline makes now.
  void verify_cached_clip(const std::string& prompt_id, const std::vector<cv::Mat>& cached,
                          const std::vector<cv::Mat>& fresh, const fs::path& f, const BaselineClipCache& cache,
                          json& cache_check);
  bool verified_here(const fs::path& f) const {
    return fs::exists(f) && w_.baseline_clip_verified(f.string(), BaselineClipCache::fingerprint(f));
  }
  // `as_read`: the file's fingerprint when its clip was read (empty: now, after this process wrote it).
  void mark_verified(const fs::path& f, const std::string& as_read = "") {
    w_.mark_baseline_clip_verified(f.string(), as_read.empty() ? BaselineClipCache::fingerprint(f) : as_read);
  }

  Worker& w_;
  GenerationSide& cand_side_;  // where the candidate's code runs (the worker, or the plugin's sandboxed worker)
  GenerationSide& base_side_;  // where the baseline's runs
  const Manifest& cand_;
  const Manifest& base_;
  const std::vector<Prompt>& prompts_;
  const GateSettings& S_;
  GateProgressCounter& progress_;
  const std::string base_hash_;  // the baseline manifest's: the key of the worker's baseline runs
  const bool is_baseline_;       // the baseline's own gate: its split clips are the baseline's outputs
  std::string idle_;             // a switch that left no trace in the first timed clip (certain_disengagement)
  std::optional<std::vector<cv::Mat>> first_cached_;  // the first prompt's cached output, read before the off run
  std::string first_fingerprint_;                     // its file's fingerprint then
  ProcessMonitor mon_;
  double harness_foreign_pending_ = 0;  // other threads' CPU in the harness's work since the last window
  GateSequence seq_;
  std::vector<std::vector<cv::Mat>> split_base8_;
};

const RunOutput& GateRunner::window(const std::string& role, bool candidate_code,
                                    const std::function<RunOutput()>& fn) {
  progress_.tick(role);
  GateWindow win;
  win.role = role;
  win.candidate_code = candidate_code;
  win.harness_foreign_cpu_s = harness_foreign_pending_;
  harness_foreign_pending_ = 0;
  win.before = mon_.sample();
  win.before.worker_cpu_s = cand_side_.worker_cpu_seconds();
  win.out = fn();
  win.after = mon_.sample();
  win.after.worker_cpu_s = cand_side_.worker_cpu_seconds();
  seq_.windows.push_back(std::move(win));
  return seq_.windows.back().out;
}

const RunOutput& GateRunner::baseline_window(const std::string& role, const std::function<RunOutput()>& fn) {
  const RunOutput& b = window(role, false, fn);
  if (!b.error.empty()) throw Error("the baseline '" + base_.id + "' failed: " + b.error);
  return b;
}

// Warm-up, untimed, so allocator and kernel selection costs land on neither side: the baseline first,
// then the candidate, each on a fresh prompt/seed. The harness's own threads are those alive before the
// process's first generation (a candidate's thread started in an earlier trial is not); the thread count
// after the baseline's warm-up is what the candidate's runs may not add to.
void GateRunner::warm_up() {
  const Manifest warm_base = warmup_manifest(base_, S_.warmup_steps),
                 warm_cand = warmup_manifest(cand_, S_.warmup_steps);
  const std::vector<pid_t> harness = harness_thread_ids();
  if (harness.empty())
    mon_.adopt_current_threads();  // a process that never made a Worker: nothing has run yet
  else
    mon_.adopt(harness);
  seq_.cores = usable_cores();
  window("warmup_baseline", false, [&] { return base_side_.run_drawn(warm_base, prompts_); });
  if (S_.plugin_run_timeout_s <= 0) cand_side_.limit_run_seconds(derived_run_timeout_s());
  seq_.threads_reference = thread_count();
  seq_.baseline_threads = at::get_num_threads();
  seq_.candidate_threads_flag = to_runtime_options(cand_).cpu_threads;
  seq_.first_candidate = seq_.windows.size();
  window("warmup_candidate", true, [&] { return cand_side_.run_drawn(warm_cand, prompts_); });
}

// Ten times the baseline's clip, from its warm-up at warmup_steps scaled to the manifest's steps (generous: the
// decode does not scale), and never under a minute: what a candidate's generation may take before it fails.
double GateRunner::derived_run_timeout_s() const {
  const GateWindow& w = seq_.windows.back();
  const double steps = static_cast<double>(std::max<int64_t>(1, base_.config.steps));
  const double warm = static_cast<double>(std::clamp<int64_t>(S_.warmup_steps, 1, base_.config.steps));
  return std::max(60.0, 10.0 * (w.after.wall_s - w.before.wall_s) * steps / warm);
}

bool GateRunner::quiet_enough(int64_t made) {
  if (made == 1 && is_baseline_ && split_times_the_noise(S_, prompts_.size())) {
    seq_.pairs_decided_by = "baseline's split";  // its timed split clips measure the noise (split_measures_the_noise)
    return true;
  }
  if (made == 1 && history_vouches()) return true;
  if (made < std::max<int64_t>(1, S_.min_timing_repeats)) return false;
  const double noise = std::max(spread_of(seq_, seq_.pair_baseline), spread_of(seq_, seq_.pair_candidate));
  seq_.pairs_noise = noise;
  if (noise > S_.quiet_noise) return false;
  seq_.pairs_decided_by = "quiet";
  return true;
}

// The worker's earlier gates at this baseline timed it at least twice within quiet_noise, and this gate's one
// baseline run is within quiet_noise of their median: the machine is in the state whose noise they measured.
bool GateRunner::history_vouches() {
  if (!S_.pairs_from_history || seq_.pair_baseline.size() != 1) return false;
  const std::vector<double>& runs = w_.baseline_run_seconds(base_hash_);
  if (runs.size() < 2) return false;
  const runtime::TimingStats hist = runtime::TimingStats::of(runs);
  const double now = seq_.windows[seq_.pair_baseline[0]].out.seconds;
  const double off = hist.median > 0 ? std::fabs(now - hist.median) / hist.median : 1.0;
  seq_.history = {
      {"runs", runs.size()}, {"median_s", hist.median}, {"spread", hist.spread()}, {"this_run_off_by", off}};
  if (hist.spread() > S_.quiet_noise || off > S_.quiet_noise) return false;
  seq_.history_noise = std::max(hist.spread(), off);
  seq_.pairs_decided_by = "history";
  return true;
}

// The median of the baseline's runs (a spot-check's included) is at most the slowest pair baseline, the
// candidate's at least its fastest run: when even that best case is within 1 + min_margin, the performance
// check fails however the rest goes. Not for the baseline's own gate or a control (no technique flags):
// their gate measures the baseline.
std::string GateRunner::certain_slowdown() const {
  if (!S_.stop_early || technique_flags_set(cand_).empty() || seq_.pair_candidate.empty()) return "";
  const double slowest_base = runtime::TimingStats::of(seconds_of(seq_, seq_.pair_baseline, total_seconds)).max;
  const double fastest_cand = runtime::TimingStats::of(seconds_of(seq_, seq_.pair_candidate, total_seconds)).min;
  const double best = fastest_cand > 0 ? slowest_base / fastest_cand : 0.0;
  if (best >= 1.0 + S_.min_margin) return "";
  return "stopped after " + std::to_string(seq_.pair_candidate.size()) + " timed pairs, the verdict certain: at best " +
         base::format_fixed(best, 3) + "x (the slowest baseline run over the candidate's fastest), and the " +
         "performance check needs more than " + base::format_fixed(1.0 + S_.min_margin, 3) + "x";
}

// Timed pairs: the candidate first, on a prompt and seed drawn inside its timed window (so nothing before
// the timer can know them, and no baseline output of them exists anywhere yet), then the baseline on the
// same prompt and seed. Next to each judged baseline run, the machine's throughput at the model's shapes
// is calibrated, so that both see the same load on the machine.
void GateRunner::timed_pairs() {
  const int64_t R = std::max<int64_t>(1, S_.timing_repeats);
  for (int64_t i = 0; i < R; ++i) {
    if (quiet_enough(i)) break;
    const RunOutput& c = window("candidate", true, [&] { return cand_side_.run_drawn(cand_, prompts_); });
    const Prompt drawn = c.prompt;
    const int64_t seed = c.seed;
    seq_.pair_candidate.push_back(seq_.windows.size() - 1);
    if (i == 0 && !(idle_ = certain_disengagement()).empty()) return;  // its baseline would change nothing
    seq_.baseline_calibrations.push_back(w_.calibrate(base_.config));
    baseline_window("baseline", [&] { return base_side_.run(base_, drawn, seed); });
    seq_.pair_baseline.push_back(seq_.windows.size() - 1);
  }
  if (seq_.pairs_decided_by.empty()) seq_.pairs_decided_by = idle_.empty() ? "most" : "stopped";
  for (size_t i : seq_.pair_baseline) w_.record_baseline_run(base_hash_, seq_.windows[i].out.seconds);
}

// The gate stops when a switch that is on left no trace in the first timed clip (authenticity must fail:
// checked before that clip's baseline is made), or after the pairs when the performance check must fail.
bool GateRunner::stop_after_pairs(GateEvidence& ev) const {
  ev.stopped_early = idle_;
  ev.stopped_check = "authenticity";
  if (ev.stopped_early.empty()) {
    ev.stopped_early = certain_slowdown();
    ev.stopped_check = "performance";
  }
  if (ev.stopped_early.empty()) ev.stopped_check.clear();
  return !ev.stopped_early.empty();
}

std::string GateRunner::certain_disengagement() const {
  if (!S_.stop_early || technique_flags_set(cand_).empty() || seq_.pair_candidate.empty()) return "";
  const RunOutput& first = seq_.windows[seq_.pair_candidate[0]].out;
  if (!first.error.empty()) return "";  // a failed run is judged whole (artifacts)
  const auto problems = runtime::engagement_problems(to_runtime_options(cand_), first.trace);
  if (problems.empty()) return "";
  return "stopped after the first timed clip, the verdict certain: " + problems.front();
}

std::string GateRunner::certain_quality_failure_of(size_t k, const BaselineClipCache& cache, json& seen) const {
  if (!S_.stop_early || is_baseline_ || technique_flags_set(cand_).empty()) return "";
  const fs::path f = cache.clip_path(prompts_[k].id, base_.config.seed);
  // Trusted as the quality check trusts it: the file was verified here, or the cache's spot-checked clip was
  // (a stale cache, e.g. other weights, shows there first and is an error of the run, not a rejection).
  if (!verified_here(f) && !verified_here(cache.clip_path(prompts_[0].id, base_.config.seed))) return "";
  const auto base8 = BaselineClipCache::read(f);
  const RunOutput& r = seq_.windows[seq_.split_candidate[k]].out;
  if (!base8 || !r.error.empty() || !finite_video(r.video)) return "";
  const std::string why =
      certain_quality_failure(prompts_[k].id, runtime::frames_from_tensor(r.video), *base8, cand_.lossless, S_, seen);
  if (why.empty()) return "";
  return "stopped after split clip " + std::to_string(k + 1) + " of " + std::to_string(prompts_.size()) +
         ", the verdict certain: " + why;
}

// The candidate on the split at the official seed (the clips of the quality gate), before any baseline
// output of them is made or read in this gate. Where this process already verified the cache, a clip
// below what the claim needs ends the gate at once (its baseline output read after the clip was made).
bool GateRunner::split(const BaselineClipCache& cache, GateEvidence& ev) {
  for (size_t k = 0; k < prompts_.size(); ++k) {
    window("candidate_split", true, [&] { return cand_side_.run(cand_, prompts_[k]); });
    seq_.split_candidate.push_back(seq_.windows.size() - 1);
    // The check compares clips on OpenCV's worker threads, which the audit would count as another thread's
    // work between runs: what it costs them is measured here and excused.
    const ProcessSample before = mon_.sample();
    ev.stopped_early = certain_quality_failure_of(k, cache, ev.stopped_details);
    harness_foreign_pending_ += std::max(0.0, mon_.sample().foreign_cpu_s() - before.foreign_cpu_s());
    if (!ev.stopped_early.empty()) {
      ev.stopped_check = "quality";
      return true;
    }
  }
  if (is_baseline_) split_measures_the_noise();
  return false;
}

// The baseline's own gate times its split clips, the baseline's outputs at one shape: the machine's noise, in
// its one pair's stead (GateSettings::pairs_from_history), and the history of its later gates.
void GateRunner::split_measures_the_noise() {
  for (size_t i : seq_.split_candidate) w_.record_baseline_run(base_hash_, seq_.windows[i].out.seconds);
  if (seq_.pairs_decided_by == "baseline's split" && seq_.split_candidate.size() >= 2)
    seq_.history_noise = spread_of(seq_, seq_.split_candidate);
}

// The duplicate-prompt audit: the first pair's prompt and seed again must cost the same and give the same clip.
void GateRunner::audit() {
  const Prompt audit_prompt = seq_.windows[seq_.pair_candidate[0]].out.prompt;
  const int64_t audit_seed = seq_.windows[seq_.pair_candidate[0]].out.seed;
  window("audit", true, [&] { return cand_side_.run(cand_, audit_prompt, audit_seed); });
  seq_.audit = seq_.windows.size() - 1;
}

// Right after the timed pairs (their last run is the baseline's, so the off run is timed in the state theirs
// were): where this process has not yet verified the cached output of the first prompt, a fresh baseline run
// of it (the spot-check that keeps the cache honest); then the off run, the same build with the technique's
// flags off, whose clip the off-identity check holds against the baseline's output.
void GateRunner::off_run(const BaselineClipCache& cache) {
  const fs::path first = cache.clip_path(prompts_[0].id, base_.config.seed);
  // The off run's reference, read before the off run: what the candidate's code does to the file after
  // cannot change it (a change before shows in the file's fingerprint: then the fresh spot-check runs).
  if (!is_baseline_) {
    first_fingerprint_ = BaselineClipCache::fingerprint(first);
    first_cached_ = BaselineClipCache::read(first);
  }
  if (!is_baseline_ && first_cached_ && !verified_here(first)) {
    seq_.baseline_calibrations.push_back(w_.calibrate(base_.config));
    const RunOutput& check = baseline_window("baseline_check", [&] { return base_side_.run(base_, prompts_[0]); });
    w_.record_baseline_run(base_hash_, check.seconds);
    seq_.baseline_check = seq_.windows.size() - 1;
  }
  if (is_baseline_) return;  // no flag to turn off: its off run would be its first split clip again
  const Manifest off = with_flags_off(cand_);
  window("off", true, [&] { return cand_side_.run(off, prompts_[0]); });
  seq_.off = seq_.windows.size() - 1;
}

void GateRunner::verify_cached_clip(const std::string& prompt_id, const std::vector<cv::Mat>& cached,
                                    const std::vector<cv::Mat>& fresh, const fs::path& f,
                                    const BaselineClipCache& cache, json& cache_check) {
  const bool same = same_frames(cached, fresh);
  const double p = same ? kPsnrCap : same_shape(cached, fresh) ? compare_clips(cached, fresh).psnr_min : 0;
  if (cache_check["checked"].is_null()) {  // the first clip checked is the one reported
    cache_check["checked"] = prompt_id;
    cache_check["bit_identical"] = same;
    cache_check["psnr_min"] = p;
  }
  if (!same && (S_.exact_off_identity || p < S_.lossless_psnr))
    throw BaselineError("the cached baseline output " + f.string() +
                        " differs from a fresh run of the baseline (PSNR " + base::format_fixed(p, 2) +
                        " dB): the cache is stale or the baseline is nondeterministic here; remove " +
                        cache.dir().string() + " and run again");
}

// Baseline outputs of the split: the baseline's own gate has made them (its split clips), checked against
// any cached ones; a spot-check's fresh run checks the first prompt's cached output; the rest come from the
// cache, made here and cached when missing.
void GateRunner::baseline_split(const BaselineClipCache& cache, json& cache_check) {
  split_base8_.assign(prompts_.size(), {});
  cache_check["checked"] = nullptr;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const fs::path f = cache.clip_path(prompts_[i].id, base_.config.seed);
    // The first prompt's output as off_run read it before the off run (none then: made fresh here).
    std::optional<std::vector<cv::Mat>> cached = i == 0 && !is_baseline_ ? first_cached_ : BaselineClipCache::read(f);
    const bool check_run = i == 0 && seq_.baseline_check.has_value();
    if (is_baseline_ || check_run) {
      const size_t w = is_baseline_ ? seq_.split_candidate[i] : *seq_.baseline_check;
      split_base8_[i] = runtime::frames_from_tensor(seq_.windows[w].out.video);
      if (cached) {
        verify_cached_clip(prompts_[i].id, *cached, split_base8_[i], f, cache, cache_check);
        mark_verified(f, i == 0 && first_cached_ ? first_fingerprint_ : "");
      } else {
        BaselineClipCache::write(f, split_base8_[i]);
        mark_verified(f);
      }
      continue;
    }
    if (cached) {
      // The first prompt's cached output with no spot-check: off_run found it verified here, before the off run.
      if (i == 0) cache_check["verified_in_process"] = true;
      split_base8_[i] = std::move(*cached);
      continue;
    }
    const RunOutput& b = baseline_window("baseline_split", [&] { return base_side_.run(base_, prompts_[i]); });
    w_.record_baseline_run(base_hash_, b.seconds);
    split_base8_[i] = runtime::frames_from_tensor(b.video);
    BaselineClipCache::write(f, split_base8_[i]);
    mark_verified(f);
  }
  if (cache_check["checked"].is_null())
    cache_check["note"] = cache_check.value("verified_in_process", false)
                              ? "verified earlier in this process against a fresh baseline run (the file unchanged)"
                              : "no cached output to check: the fresh runs were cached";
}

// Authenticity compares the candidate on prompts/seeds whose baseline output exists (the split at the
// official seed) with its fresh draws of the timed pairs. Those runs are minutes apart, and a load spike
// on a busy machine can slow the fresh ones several-fold (docs/gate-defences.md). When they disagree by
// more than that comparison could ever let through (half), one adjacent pair decides: a fresh draw, then
// the first prompt at the official seed (whose baseline output exists now). A candidate that depends on
// the baseline's outputs is faster on the second of the pair too; a load spike is not in both places.
void GateRunner::recheck_if_disagreeing() {
  std::vector<double> fresh_s, seen_s;
  for (size_t i : seq_.pair_candidate) fresh_s.push_back(seq_.windows[i].out.seconds);
  for (size_t i : seq_.split_candidate) seen_s.push_back(seq_.windows[i].out.seconds);
  const double fresh = median_of(fresh_s), seen = median_of(seen_s);
  if (!(fresh > 0 && seen < 0.5 * fresh)) return;
  window("recheck_fresh", true, [&] { return cand_side_.run_drawn(cand_, prompts_); });
  const size_t a = seq_.windows.size() - 1;
  window("recheck_seen", true, [&] { return cand_side_.run(cand_, prompts_[0]); });
  seq_.recheck = std::make_pair(a, seq_.windows.size() - 1);
}

GateTiming timing_of(const GateSequence& seq, const GateSettings& S) {
  GateTiming t;
  auto text = [](const RunOutput& r) { return r.times.text_encoding; };
  auto denoise = [](const RunOutput& r) { return r.times.denoising; };
  auto decode = [](const RunOutput& r) { return r.times.decoding; };
  const std::vector<size_t> base_runs = baseline_timed_runs(seq);
  std::vector<double> base_times = seconds_of(seq, base_runs, total_seconds);
  for (const auto& win : seq.windows) {
    if (win.role.rfind("warmup", 0) == 0) continue;
    const auto& r = win.out;
    t.timed_stages.push_back({{"run", win.role},
                              {"prompt", r.prompt.id},
                              {"seed", r.seed},
                              {"total_s", r.seconds},
                              {"text_s", r.times.text_encoding},
                              {"denoise_s", r.times.denoising},
                              {"decode_s", r.times.decoding}});
  }
  time_the_pairs(seq, std::move(base_times), t);
  t.margin = std::max(S.min_margin, t.noise);
  t.candidate_split_s = seconds_of(seq, seq.split_candidate, total_seconds);
  if (seq.recheck)
    t.recheck_s =
        std::make_pair(seq.windows[seq.recheck->first].out.seconds, seq.windows[seq.recheck->second].out.seconds);
  t.baseline_denoise_s = median_of(seconds_of(seq, base_runs, denoise));
  t.baseline_text_s = median_of(seconds_of(seq, seq.pair_baseline, text));
  t.baseline_decode_s = median_of(seconds_of(seq, seq.pair_baseline, decode));
  t.candidate_text_s = median_of(seconds_of(seq, seq.pair_candidate, text));
  t.candidate_decode_s = median_of(seconds_of(seq, seq.pair_candidate, decode));
  return t;
}

ForwardWork work_of(Worker& w, const RunConfig& base, const RunConfig& cand) {
  const auto& tc = w.pipeline().transformer()->config();
  const auto& vc = w.pipeline().vae()->config();
  const int64_t text = w.pipeline().max_text_length;
  auto flops = [&](const RunConfig& c, bool attention) {
    return runtime::transformer_flops(tc, 1, (c.frames - 1) / vc.scale_factor_temporal + 1,
                                      c.height / vc.scale_factor_spatial, c.width / vc.scale_factor_spatial, text,
                                      attention);
  };
  const auto fl = flops(base, true);
  ForwardWork f;
  f.base_linear = fl.linear;
  f.base_time_embedding = fl.time_embedding;
  f.base_attention = fl.attention;
  f.candidate_linear = flops(cand, false).linear;
  f.base_forwards = base.steps * branches_of(base);
  f.num_layers = tc.num_layers;
  f.max_text_length = text;
  return f;
}

// Clips: the split at the official seed, then the timed pairs (fresh prompts and seeds).
std::vector<GateClip> clips_of(const GateSequence& seq, const std::vector<Prompt>& prompts,
                               std::vector<std::vector<cv::Mat>>& split_base8) {
  std::vector<GateClip> clips;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GateClip c;
    c.name = prompts[i].id;
    c.run = seq.windows[seq.split_candidate[i]].out;
    c.base8 = std::move(split_base8[i]);
    clips.push_back(std::move(c));
  }
  for (size_t k = 0; k < seq.pair_candidate.size(); ++k) {
    GateClip c;
    c.run = seq.windows[seq.pair_candidate[k]].out;
    c.name = "pair" + std::to_string(k) + ":" + c.run.prompt.id + "@" + std::to_string(c.run.seed);
    c.pair = true;
    c.base8 = runtime::frames_from_tensor(seq.windows[seq.pair_baseline[k]].out.video);
    clips.push_back(std::move(c));
  }
  for (auto& c : clips) {
    c.cand8 = runtime::frames_from_tensor(c.run.video);
    c.identical = same_frames(c.cand8, c.base8);
  }
  return clips;
}

// The precision above the baseline's compute dtype ("" above float64).
std::string control_dtype_of(const Manifest& base, const at::Device& dev) {
  const at::ScalarType t = runtime::compute_dtype(to_runtime_options(base).dtype, dev);
  return t == at::kDouble ? "" : t == at::kFloat ? "fp64" : "fp32";
}

}  // namespace

Manifest warmup_manifest(const Manifest& m, int64_t steps) {
  Manifest w = m;
  if (steps > 0) w.config.steps = std::min(m.config.steps, steps);
  return w;
}

GateProgressCounter::GateProgressCounter(const GateSettings& settings, std::string manifest_id, std::string split,
                                         int64_t expected_runs)
    : settings_(settings),
      manifest_id_(std::move(manifest_id)),
      split_(std::move(split)),
      expected_(expected_runs),
      began_(std::chrono::steady_clock::now()) {}

void GateProgressCounter::tick(const std::string& role) {
  if (!settings_.progress) return;
  ++run_;
  settings_.progress({manifest_id_, split_, stage_label(role), run_, std::max(expected_, run_),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count()});
}

int64_t expected_gate_runs(int64_t np, const GateSettings& S, bool baseline_gate) {
  return generations_made(plan_gate_generations(std::vector<std::string>(static_cast<size_t>(std::max<int64_t>(0, np))),
                                                S, {}, baseline_gate));
}

namespace {

// The evidence of a gate that stopped after its pairs: the sequence, the pairs' timing, the work.
GateEvidence stopped_evidence(Worker& w, const Manifest& cand, const Manifest& base, const std::vector<Prompt>& prompts,
                              GateRunner& runner, GateEvidence ev) {
  runner.sequence().harness_threads = runner.harness_threads();
  ev.prompts = prompts;
  ev.sequence = std::move(runner.sequence());
  time_the_pairs(ev.sequence, seconds_of(ev.sequence, ev.sequence.pair_baseline, total_seconds), ev.timing);
  ev.work = work_of(w, base.config, cand.config);
  ev.calibration = best_calibration(ev.sequence.baseline_calibrations);
  ev.on_cuda = w.device().is_cuda();
  return ev;
}

}  // namespace

GateEvidence run_gate_generations(Worker& w, const Manifest& cand, const Manifest& base,
                                  const std::vector<Prompt>& prompts, const GateRunContext& ctx, const GateSettings& S,
                                  GateProgressCounter& progress) {
  LocalSide local(w);
  GateRunner runner(w, ctx.candidate ? *ctx.candidate : local, ctx.baseline ? *ctx.baseline : local, cand, base,
                    prompts, S, progress);
  runner.warm_up();
  runner.timed_pairs();
  GateEvidence ev;
  if (runner.stop_after_pairs(ev)) return stopped_evidence(w, cand, base, prompts, runner, std::move(ev));
  const fs::path cache_root =
      S.cache_dir.empty() ? fs::path(ctx.out_dir).parent_path() / "baseline-cache" : fs::path(S.cache_dir);
  json cache_key = ctx.environment;  // the gate environment, plus the baseline's threads and manifest
  cache_key["cpu_threads"] = runner.sequence().baseline_threads;
  cache_key["baseline_hash"] = ctx.baseline_hash;
  const BaselineClipCache cache(cache_root, cache_key);
  ev.cache_root = cache_root.string();
  ev.cache_dir = cache.dir().string();
  runner.off_run(cache);
  if (runner.split(cache, ev)) return stopped_evidence(w, cand, base, prompts, runner, std::move(ev));
  runner.audit();
  ev.cache_check = {{"dir", cache.dir().string()}, {"key", cache.key()}};
  runner.baseline_split(cache, ev.cache_check);
  runner.recheck_if_disagreeing();
  runner.sequence().harness_threads = runner.harness_threads();
  ev.prompts = prompts;
  ev.sequence = std::move(runner.sequence());
  const GateSequence& seq = ev.sequence;
  ev.clips = clips_of(seq, prompts, runner.split_base8());
  ev.audit = seq.windows[seq.audit].out;
  if (seq.off)
    ev.off_run = seq.windows[*seq.off].out;
  else
    ev.off_not_run = "the baseline's own gate: no technique flag to turn off (its audit repeats a request)";
  ev.off_manifest = to_json(with_flags_off(cand));
  ev.timing = timing_of(seq, S);
  ev.work = work_of(w, base.config, cand.config);
  ev.calibration = best_calibration(seq.baseline_calibrations);
  ev.on_cuda = w.device().is_cuda();
  ev.control_dtype = control_dtype_of(base, w.device());
  return ev;
}

json timing_choices(const GateSequence& seq, const GateSettings& S) {
  auto first_and_later = [&](const std::vector<size_t>& at) {
    std::vector<double> later;
    for (size_t k = 1; k < at.size(); ++k) later.push_back(seq.windows[at[k]].out.seconds);
    return json{{"first_s", at.empty() ? 0.0 : seq.windows[at[0]].out.seconds},
                {"later_median_s", later.empty() ? json(nullptr) : json(median_of(later))}};
  };
  std::vector<size_t> baseline_runs = seq.pair_baseline;
  if (seq.baseline_check) baseline_runs.push_back(*seq.baseline_check);
  return {{"pairs",
           {{"made", seq.pair_candidate.size()},
            {"most", std::max<int64_t>(1, S.timing_repeats)},
            {"least", std::max<int64_t>(1, S.min_timing_repeats)},
            {"quiet_noise", S.quiet_noise},
            {"noise_seen", seq.pairs_noise < 0 ? json(nullptr) : json(seq.pairs_noise)},
            {"decided_by", seq.pairs_decided_by},
            {"history", seq.history}}},
          {"warmup",
           {{"steps", S.warmup_steps},
            {"baseline", first_and_later(baseline_runs)},
            {"candidate", first_and_later(seq.pair_candidate)}}}};
}

std::vector<PrecisionControlClip> run_precision_controls(Worker& w, const Manifest& base, const GateEvidence& ev,
                                                         const std::vector<size_t>& clips,
                                                         GateProgressCounter& progress) {
  std::vector<PrecisionControlClip> controls;
  const std::string& up = ev.control_dtype;
  if (up.empty() || clips.empty()) return controls;
  Manifest ctl = base;
  ctl.id = base.id + ".precision-" + up;
  ctl.kind = "control";
  ctl.base = base.id;
  ctl.lossless = false;
  ctl.flags["dtype"] = up;
  ctl = parse_manifest(to_json(ctl), "the precision control of " + base.id);
  for (size_t k : clips) {
    // The control's clip of this prompt, cached beside the baseline's (the same key: build, weights,
    // device, threads, baseline).
    const fs::path f = fs::path(ev.cache_dir) /
                       (ev.prompts[k].id + "-" + std::to_string(base.config.seed) + "-control-" + up + ".safetensors");
    PrecisionControlClip clip;
    if (auto cached = BaselineClipCache::read(f)) {
      clip.frames = std::move(*cached);
      controls.push_back(std::move(clip));
      continue;
    }
    progress.tick("precision_control");
    const RunOutput r = w.run(ctl, ev.prompts[k]);
    if (!r.error.empty() || !finite_video(r.video)) {
      clip.error = r.error.empty() ? std::string("non-finite output") : r.error;
      controls.push_back(std::move(clip));
      break;
    }
    clip.frames = runtime::frames_from_tensor(r.video);
    BaselineClipCache::write(f, clip.frames);
    controls.push_back(std::move(clip));
  }
  return controls;
}

}  // namespace autooptim::gates
