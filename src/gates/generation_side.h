#pragma once
// Where the gate's generations of one side (the candidate's, the baseline's) run: in this process's worker
// (manifests of built-in techniques: LocalSide), or in a worker process the gate does not trust (a manifest
// that pins a technique plugin: gates/sandboxed_worker.h), so that the plugin's code never runs in the gate.
#include <optional>
#include <vector>

#include "gates/manifest.h"
#include "gates/prompts.h"
#include "gates/worker.h"

namespace autooptim::gates {

class GenerationSide {
 public:
  virtual ~GenerationSide() = default;
  // One generation of `prompt` under `m` (the seed: `seed`, else the config's), timed around the whole of it.
  virtual RunOutput run(const Manifest& m, const Prompt& prompt, std::optional<int64_t> seed = std::nullopt) = 0;
  // One generation whose prompt (one of `choices`) and seed are drawn after the timer started.
  virtual RunOutput run_drawn(const Manifest& m, const std::vector<Prompt>& choices) = 0;
  // The CPU seconds the side's own process has used so far; negative when it is this process (whose threads the
  // gate's process monitor accounts for).
  virtual double worker_cpu_seconds() { return -1; }
  // A generation of this side that takes longer fails (a side in another process is killed then); this
  // process's own side cannot be stopped and ignores it.
  virtual void limit_run_seconds(double) {}
};

// This process's worker.
class LocalSide : public GenerationSide {
 public:
  explicit LocalSide(Worker& w) : w_(w) {}
  RunOutput run(const Manifest& m, const Prompt& prompt, std::optional<int64_t> seed) override {
    return w_.run(m, prompt, seed);
  }
  RunOutput run_drawn(const Manifest& m, const std::vector<Prompt>& choices) override {
    return w_.run_drawn(m, choices);
  }

 private:
  Worker& w_;
};

}  // namespace autooptim::gates
