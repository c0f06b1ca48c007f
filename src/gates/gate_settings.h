#pragma once
// The gate's judgement settings (thresholds, floors, folders) and its progress callback.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "gates/manifest.h"

namespace autooptim::gates {

// Where a gate run is: announced before each generation it runs.
struct GateProgress {
  std::string manifest_id, split;
  std::string stage;          // "warm-up baseline", "timed candidate", "duplicate-prompt audit", ...
  int64_t run = 0, runs = 0;  // this generation's number, and how many the gate expects to run
  double elapsed_s = 0;       // since the gate run began
};

struct GateSettings {
  std::string prompts_dir = "prompts";
  // The baseline is always the harness's pinned one (pinned_baseline()), never a manifest from a folder
  // of anyone's choosing; the harness may only run it at another configuration (a reduced run).
  std::optional<RunConfig> baseline_config;  // default: the model's official configuration
  std::string cache_dir;                     // baseline outputs; default <out>/../baseline-cache
  // Records of the baseline's stage times on this machine (a slowed baseline is an error of the run);
  // default <cache_dir>/../baseline-records.json.
  std::string records_path;
  // Technique plugins the gate may be asked to judge, by sha256 -> file (gate --plugin). A manifest that pins
  // one runs in a sandboxed worker that loads it, beside a worker of the pinned baseline (gates/sandboxed_worker.h);
  // this process never loads it.
  std::map<std::string, std::string> plugin_files;
  // Without an OS sandbox on this machine, run the plugin's worker as a plain process (the verdict says so)
  // instead of refusing to gate it.
  bool plugin_without_sandbox = false;
  // A plugin's generation that has not answered after this many seconds fails, and its worker is killed: a
  // plugin that hangs costs the gate this long at most (the worker answers nothing more, the rest fail at once).
  // 0: derived from the baseline's warm-up, ten times its clip (scaled to the full steps), at least 60 s; the
  // candidate's own warm-up, before that is known, may take an hour.
  double plugin_run_timeout_s = 0;
  int64_t timing_repeats = 3;  // interleaved candidate/baseline timed pairs, at most
  // Pairs beyond min_timing_repeats are made only while the timings are not quiet: after each pair from the
  // min_timing_repeats-th on, the gate stops pairing when both sides' relative range is at most quiet_noise
  // (a quiet GPU needs fewer pairs than a loaded 2-core CPU; the verdict records the noise and the pairs).
  int64_t min_timing_repeats = 2;
  double quiet_noise = 0.02;
  // One pair is enough where the machine's noise is known already: this worker process's earlier gates at the
  // same baseline timed it at least twice within quiet_noise of each other, and this gate's one baseline run
  // is within quiet_noise of their median (the machine is in the state they measured). Their spread is then
  // this gate's noise. Off (or a gate that finds no such history): min_timing_repeats as above.
  bool pairs_from_history = true;
  // The warm-ups run each manifest at its shape with this many denoising steps (0: the whole clip). What a
  // warm-up is for (allocations, kernel and algorithm choice, captured graphs at the shape, the text encoder
  // and one decode) takes a few forwards and one decode, not a clip; the verdict records each side's first
  // timed run against its later ones (docs/gate-cost.md).
  int64_t warmup_steps = 2;
  // A gate stops as soon as its verdict is certain, and says why: after the timed pairs, a candidate with
  // technique flags whose best case (the slowest baseline run over its fastest run) cannot beat
  // 1 + min_margin fails the performance check whatever the rest would show.
  bool stop_early = true;    // --full-gate turns it and pairs_from_history off
  double min_margin = 0.03;  // a speedup must beat the noise and at least this
  // Quality tolerance for lossy candidates (gate 5); lossless ones must match within lossless_psnr.
  double min_psnr = 30.0;
  double min_ssim = 0.90;
  double lossless_psnr = 50.0;
  // The precision floor of a lossless claim. Where the compute dtype rounds coarsely (bf16 on a GPU), the
  // baseline is itself only ~45-52 dB from the same run one precision up, so any change of rounding (a
  // fused kernel, another GEMM algorithm) lands near or below lossless_psnr against it however exact it is.
  // A lossless candidate whose split clips miss lossless_psnr (or SSIM 0.999) still passes when they are as
  // close to the precision control (the baseline one precision up: bf16 -> fp32, fp32 -> fp64) as the
  // baseline's own clips are: on average over those clips within floor_psnr_slack / floor_ssim_slack (one
  // clip's distance is one sample of a chaotic trajectory: +-1.4 dB measured between equally exact
  // kernels), and no clip beyond the clip slacks. Its timed pairs' clips (no control run there) may then
  // fall audit_psnr_slack below its worst split clip. Off: the 50 dB rule alone.
  bool precision_floor = true;
  double floor_psnr_slack = 1.0;  // dB, the mean over the clips
  double floor_ssim_slack = 0.001;
  double floor_clip_psnr_slack = 3.0;  // dB, any one clip
  double floor_clip_ssim_slack = 0.003;
  // The timed pairs' clips (fresh prompts/seeds) are quality audits too: a lossy candidate's may fall
  // this far below min_psnr (one sample each, so a little slack), a lossless one's none.
  double audit_psnr_slack = 3.0;
  // Off identity (gate 4): outputs equal (or within lossless_psnr on nondeterministic GPUs) and time
  // within max(2 x noise, this) of the baseline.
  double off_time_tolerance = 0.15;
  bool exact_off_identity = true;  // CPU runs are deterministic: demand bit-identical output
  int64_t max_prompts = 0;         // 0 = the whole split
  // A slowed baseline: its denoising efficiency (FLOPs of the forwards it must run over its time, as a
  // share of the machine's throughput calibrated in the same process) must reach this floor (< 0: the
  // model's and device's default, 0: no floor), and it may not be slower than the records of earlier
  // runs on this machine by more than max(this tolerance, 3 x the noise) on every clock it is timed by.
  double min_baseline_efficiency = -1;
  double baseline_record_tolerance = 0.40;
  // Work outside the timed windows: a candidate's CPU time outside its own runs (other threads during the
  // baseline's runs, between runs, a warm-up beyond its timed runs) may be at most this share of one
  // timed run's CPU time (and 0.2 s); device work left queued at a window's start likewise.
  double untimed_work_fraction = 0.25;
  // Work floor of every candidate: the denoising loop runs at least this share of the forwards the
  // baseline runs (a cache cannot skip (nearly) everything), and a cache its declared warm-up steps.
  double min_forward_share = 0.05;
  // The visual check's semantic part: the object of each clip (detect_object_track) must keep the
  // baseline's colour and motion (lost_semantics). -1: for models whose prompts are procedural scenes
  // of one object (wan22-tiny), 0: off, 1: on.
  int object_check = -1;
  // Called before every generation (gate and run show it as progress). An exception it throws ends
  // the gate run without a verdict (how an interrupted run stops the gate it is in).
  std::function<void(const GateProgress&)> progress;
};

}  // namespace autooptim::gates
