#pragma once
// What a gate run leaves for the checks to judge (../docs/harness.md): every generation as a window with
// the process sampled around it, the judged clips with their baseline's, the timings, and the model's
// work per forward. The checks read only this (and the settings), so each can be tested on evidence made
// in the test.
#include <opencv2/core.hpp>

#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/stats.h"
#include "gates/integrity.h"
#include "gates/prompts.h"
#include "gates/worker.h"

namespace autooptim::gates {

// One generation of the gate's sequence, with the process sampled around it.
struct GateWindow {
  // warmup_baseline, warmup_candidate, candidate, baseline, candidate_split, audit, baseline_check, off,
  // baseline_split, recheck_fresh, recheck_seen (gates/gate_plan.h says what each is for)
  std::string role;
  bool candidate_code = false;  // the candidate's manifest (or its off run) ran in it
  ProcessSample before, after;
  RunOutput out;
  // Other threads' CPU time in the harness's own work between the previous window and this one (the early-stop
  // quality check's parallel PSNR/SSIM), measured around that work and excused from the untimed-work audit.
  double harness_foreign_cpu_s = 0;
};

// The generations in the order they ran, and where each part of the sequence is in it.
struct GateSequence {
  std::deque<GateWindow> windows;  // a deque: references to earlier windows stay valid
  size_t first_candidate = 0;      // the candidate's warm-up
  std::vector<size_t> pair_candidate, pair_baseline, split_candidate;
  size_t audit = 0;
  std::optional<size_t> off;  // the off run (none in the baseline's own gate)
  // The fresh baseline run that spot-checks the cached outputs: only in a worker's first gate on a cache
  // it has not verified yet (the baseline's own gate checks every cached clip against its split instead).
  std::optional<size_t> baseline_check;
  // The adjacent fresh-draw / official-seed pair, run when the split and the timed pairs disagree.
  std::optional<std::pair<size_t, size_t>> recheck;
  // Next to each judged baseline run, the machine's throughput at the model's shapes.
  std::vector<Calibration> baseline_calibrations;
  int threads_reference = 0;           // threads alive after the baseline's warm-up
  int harness_threads = 0;             // threads the monitor adopted as the harness's own
  int baseline_threads = 0;            // libtorch's threads for the baseline
  int64_t candidate_threads_flag = 0;  // the candidate's cpu_threads flag
  int cores = 0;                       // the CPUs the process may run on
  double pairs_noise = -1;             // the pairs' relative range when the gate last asked (-1: never)
  // Why the gate made no more pairs: "quiet" (the quiet minimum made, both sides within quiet_noise), "history"
  // (one pair: the worker's earlier gates measured the noise, GateSettings::pairs_from_history), "most"
  // (timing_repeats made), "stopped" (an idle switch ended the gate after the first clip).
  std::string pairs_decided_by;
  // Where the worker's earlier gates decided: their baseline runs (count, median, spread) and this gate's
  // one baseline run's distance from their median; history_noise the larger of the two (-1: they did not).
  nlohmann::json history = nullptr;
  double history_noise = -1;
};

// One candidate clip and the baseline clip of the same prompt and seed.
struct GateClip {
  std::string name;   // the prompt id (the split at the official seed) or "pair<i>:<id>@<seed>"
  bool pair = false;  // a timed pair's clip: prompt and seed drawn inside the candidate's timed window
  RunOutput run;      // the candidate's run that made it
  std::vector<cv::Mat> cand8, base8;
  bool identical = false;  // same size and bit for bit the baseline's
};

// The timings the checks compare: the timed pairs (and a cache spot-check's baseline run), the split, the stages.
struct GateTiming {
  runtime::TimingStats baseline, candidate;
  double speedup = 0, noise = 0, margin = 0;
  std::vector<double> candidate_split_s;
  std::optional<std::pair<double, double>> recheck_s;  // fresh, seen
  double baseline_denoise_s = 0, baseline_text_s = 0, baseline_decode_s = 0;
  double candidate_text_s = 0, candidate_decode_s = 0;
  nlohmann::json timed_stages = nlohmann::json::array();  // every run but the warm-ups
};

// The model's work at the baseline's and the candidate's configurations.
struct ForwardWork {
  double base_linear = 0, base_time_embedding = 0, base_attention = 0;  // FLOPs of one baseline forward
  double candidate_linear = 0;  // GEMM FLOPs of one candidate forward (attention may be sparse)
  int64_t base_forwards = 0;    // forwards the baseline runs
  int64_t num_layers = 0, max_text_length = 0;
};

struct GateEvidence {
  // Why the gate stopped before its last generation, its verdict certain ("" when it made every generation),
  // and the check that fails (performance, authenticity or quality) with what it saw: then only the sequence,
  // the timing, the work and the calibration are filled.
  std::string stopped_early, stopped_check;
  nlohmann::json stopped_details = nlohmann::json::object();
  std::vector<Prompt> prompts;
  GateSequence sequence;
  std::vector<GateClip> clips;  // the split at the official seed, then the timed pairs
  RunOutput audit, off_run;
  std::string off_not_run;      // why there is no off run ("" when there is)
  nlohmann::json off_manifest;  // the candidate with its flags off, as run
  GateTiming timing;
  ForwardWork work;
  Calibration calibration;  // the fastest rates seen over the gate's calibration rounds
  double peak_tflops = 0;   // the worker's dense matmul peak (measured once per process)
  bool on_cuda = false;
  // The baseline output cache of this gate environment, and the check of its first clip.
  std::string cache_root, cache_dir;
  nlohmann::json cache_check;
  std::string control_dtype;  // the precision above the baseline's ("" where it computes in float64)
  // The first timed pair's clip (the split's clips come first).
  const GateClip& first_pair() const {
    for (const auto& c : clips)
      if (c.pair) return c;
    return clips.at(clips.size());  // throws: no timed pair
  }
};

}  // namespace autooptim::gates
