#pragma once
// The generations of one gate run, in the order the gate makes them, known before it runs: whose code
// runs each, on which prompt and seed, whether the baseline-output cache can stand in for it, and which
// measurement or defence it serves (docs/gate-cost.md). `run --plan` prices them, the gate's progress
// counts them, and a test holds a real gate run's windows against them (gate_run.cpp makes the sequence).
#include <cstdint>
#include <string>
#include <vector>

#include "gates/gate_settings.h"

namespace autooptim::gates {

struct PlannedGeneration {
  std::string role;          // the window's role in the gate's evidence (GateWindow::role)
  std::string side;          // "baseline", "candidate", or "off" (the candidate's manifest with its flags off)
  std::string prompt;        // "drawn" (inside the timed window), "<id> @ official seed", "pair 1 again"
  bool cacheable = false;    // a baseline output the keyed cache may hold
  bool cached = false;       // ... and holds now: not generated
  bool conditional = false;  // made only when the gate needs it (pairs beyond the quiet minimum, recheck, control)
  int64_t steps = 0;         // denoising steps when fewer than the configuration's (a warm-up); 0: all
  std::string serves;        // what it is for
};

// prompt_ids: the split's prompts the gate judges; cached: for each, whether the baseline cache already
// holds its output at the official seed (empty: none cached); baseline_gate: the baseline's own gate, whose
// split clips are the baseline's outputs (none made twice) and, timed, the machine's noise (one pair where
// settings.pairs_from_history; a candidate's gate after it in the process: one where its baseline run agrees).
std::vector<PlannedGeneration> plan_gate_generations(const std::vector<std::string>& prompt_ids,
                                                     const GateSettings& settings, const std::vector<bool>& cached = {},
                                                     bool baseline_gate = false);

// The baseline's own gate makes one timed pair where its split clips, timed, measure the machine's noise: with
// GateSettings::pairs_from_history and two prompts or more.
bool split_times_the_noise(const GateSettings& settings, size_t prompts);

// The generations the gate will make (conditional ones and cache hits left out).
int64_t generations_made(const std::vector<PlannedGeneration>& plan);

// What a clip costs at the baseline's speed: the whole clip, and one denoising step of `steps` (every CFG
// branch's forward), so that a generation of fewer steps is priced by what it leaves out.
struct ClipCost {
  double clip_s = 0, step_s = 0;
  int64_t steps = 0;
};

// Seconds of one planned generation: a baseline-speed clip, the candidate's at `candidate_speedup` times
// that speed; a cache hit and a conditional generation cost nothing.
double planned_seconds(const PlannedGeneration& g, const ClipCost& cost, double candidate_speedup);

}  // namespace autooptim::gates
