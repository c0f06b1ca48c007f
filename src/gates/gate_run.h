#pragma once
// The gate run: the sequence of generations a verdict rests on (warm-ups, interleaved timed pairs, the
// split's clips, the duplicate-prompt audit, a spot-check of the cached baseline outputs where this process
// has not verified them, the off run, the split's baselines from the cache or made and cached, and where
// the split and the pairs disagree an adjacent recheck), each a window with the process sampled around it.
// It stops as soon as the verdict is certain (GateSettings::stop_early). It returns the evidence; the
// checks judge it.
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/checks/precision_floor.h"
#include "gates/gate_evidence.h"
#include "gates/gate_settings.h"
#include "gates/generation_side.h"
#include "gates/manifest.h"
#include "gates/prompts.h"
#include "gates/worker.h"

namespace autooptim::gates {

// Announces each generation of a gate (which run of how many, what it is for) to settings.progress.
class GateProgressCounter {
 public:
  GateProgressCounter(const GateSettings& settings, std::string manifest_id, std::string split, int64_t expected_runs);
  // role: the window's role (warmup_baseline, candidate, ..., precision_control).
  void tick(const std::string& role);

 private:
  const GateSettings& settings_;
  std::string manifest_id_, split_;
  int64_t expected_ = 0, run_ = 0;
  std::chrono::steady_clock::time_point began_;
};

// The generations a gate expects with a cold cache (gates/gate_plan.h); baseline_gate: the baseline's own.
int64_t expected_gate_runs(int64_t prompts, const GateSettings& settings, bool baseline_gate = false);

// What the gate run needs besides the manifests and the prompts.
struct GateRunContext {
  nlohmann::json environment;  // gate_environment(): keys the baseline cache
  std::string baseline_hash;
  std::string out_dir;  // the gate's folder (the default cache is beside it)
  // Where each side's generations run (gates/generation_side.h); null: the worker. A plugin's manifest runs
  // in its sandboxed worker and the pinned baseline in another, so that both cross the same process boundary.
  GenerationSide* candidate = nullptr;
  GenerationSide* baseline = nullptr;
};

// A warm-up: the manifest at its shape with `steps` denoising steps (0: as it is). What a warm-up is for
// (allocations, kernel and algorithm choice, graphs at the shape, the text encoder, one decode) takes a few
// forwards and one decode, not a clip (GateSettings::warmup_steps); a worker's trials warm up the same way.
Manifest warmup_manifest(const Manifest& m, int64_t steps);

// Runs the sequence. Throws Error when a baseline run fails, BaselineError when the cached baseline
// output contradicts a fresh run.
GateEvidence run_gate_generations(Worker& worker, const Manifest& candidate, const Manifest& baseline,
                                  const std::vector<Prompt>& prompts, const GateRunContext& context,
                                  const GateSettings& settings, GateProgressCounter& progress);

// What the gate chose and what it saw of it (integrity.timing_choices): the timed pairs made against the
// most and the least asked for, with the noise that decided; the warm-ups' steps, and each side's first
// timed run against its later ones (a warm-up too short for the steady state shows as a slower first run).
nlohmann::json timing_choices(const GateSequence& sequence, const GateSettings& settings);

// The precision control's clips (the baseline one precision up) of these split clips (indices of
// evidence.clips), read from the baseline cache or run and cached: what the quality gate's precision floor
// compares with. Stops after the first control that failed (its clip carries the error).
std::vector<PrecisionControlClip> run_precision_controls(Worker& worker, const Manifest& baseline,
                                                         const GateEvidence& evidence, const std::vector<size_t>& clips,
                                                         GateProgressCounter& progress);

}  // namespace autooptim::gates
