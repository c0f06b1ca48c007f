#pragma once
// The options of the gate's judgement that gate and run share.
#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "gates/gate.h"

namespace autooptim::app {

inline void add_gate_judgement_options(CLI::App* cmd, gates::GateSettings& s) {
  cmd->add_option("--object-check", s.object_check,
                  "The visual check's object part: the clip's one object keeps the baseline's colour and motion "
                  "(auto: for wan22-tiny, whose prompts are scenes of one object)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, int>{{"auto", -1}, {"on", 1}, {"off", 0}}))
      ->default_str("auto");
  cmd->add_flag("--no-precision-floor{false}", s.precision_floor,
                "Judge a lossless claim by the 50 dB rule alone, without the precision control "
                "(the baseline one precision up; docs/gate-defences.md)");
  cmd->add_flag_callback(
      "--full-gate",
      [&s] {
        s.stop_early = false;
        s.pairs_from_history = false;
      },
      "Make every generation of the gate: go on when its verdict is already certain, and make at least "
      "the quiet minimum of timed pairs where the worker's earlier gates already measured the machine's noise "
      "(by default the gate stops early and pairs once where it may; docs/gate-cost.md)");
}

}  // namespace autooptim::app
