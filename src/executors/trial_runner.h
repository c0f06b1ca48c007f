#pragma once
// Measures candidate flags against the baseline on a few visible prompts: the executors' instrument.
// Rough by design (few repetitions, no gates): it ranks proposals. It holds no model: every trial is a
// request to the run's workers (docs/workers.md), which hold the one loaded model per device.
#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "executors/executor.h"
#include "workers/launcher.h"
#include "workers/messages.h"
#include "workers/protocol.h"

namespace autooptim::executors {

class TrialRunner {
 public:
  TrialRunner(const ExecutorRequest& req, const gates::Manifest& base, std::vector<gates::Prompt> prompts);
  ~TrialRunner();

  // Runs the flags on the first n prompts, interleaved with the baseline; PSNR against the
  // baseline's clip of the same prompt and seed (on a worker).
  Trial measure(const nlohmann::json& flags, const std::string& label, int64_t n);
  // The same on these prompts (an agent's choice among the visible ones: the caller checks that they are). With
  // `plugin`, the flags turn on that plugin's techniques: the worker runs the candidate in the plugin's sandboxed
  // worker (issue 42), never in its own process.
  Trial measure_on(const nlohmann::json& flags, const std::string& label, const std::vector<gates::Prompt>& prompts,
                   const workers::PluginRef& plugin = {});
  // Runs the flags alone on the first n prompts (a calibration: no baseline, no timing) and returns
  // each run's trace. Not a candidate trial: the budget does not count it.
  std::vector<runtime::Trace> traces(const nlohmann::json& flags, const std::string& label, int64_t n);
  int64_t trials() const { return trials_; }
  // Charges one trial for work that is not a measurement (an agent's calibration).
  void count_trial() { ++trials_; }
  // True while another trial fits the budget and no stop was requested.
  bool can_measure(int64_t budget) const { return trials_ < budget && !stop_requested(); }
  // Async-signal-safe: sets a lock-free atomic flag.
  static void request_stop();
  static bool stop_requested();
  const std::vector<gates::Prompt>& prompts() const { return prompts_; }
  int64_t steps() const { return base_.config.steps; }
  const gates::Manifest& base() const { return base_; }
  bool on_gpu() const { return on_gpu_; }

 private:
  nlohmann::json request(const std::string& kind, const nlohmann::json& flags, const std::string& label,
                         const std::vector<gates::Prompt>& prompts, const workers::PluginRef& plugin = {}) const;
  std::vector<gates::Prompt> first(int64_t n) const;
  const ExecutorRequest& req_;
  gates::Manifest base_;
  std::vector<gates::Prompt> prompts_;
  std::string private_dir_;  // the temporary run folder of a private worker ("" when serving a run)
  int parent_ = 0;           // the orchestrator's pid when serving a run (0 alone)
  // While a trial waits: our private worker's health, and whether the orchestrator still lives (an
  // orphaned executor abandons its trial at once instead of running beside a resumed run's executors).
  void while_waiting() const;
  std::unique_ptr<workers::LocalLauncher> private_worker_;
  std::unique_ptr<workers::Client> client_;
  bool on_gpu_ = false;
  int64_t trials_ = 0;
};

}  // namespace autooptim::executors
