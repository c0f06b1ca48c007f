#pragma once
// Measures candidate flags against the baseline on a few visible prompts, in one loaded model: the
// executors' instrument. Rough by design (few repetitions, no gates): it ranks proposals.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "executors/executor.h"

namespace autooptim::executors {

class TrialRunner {
 public:
  TrialRunner(const ExecutorRequest& req, const gates::Manifest& base, std::vector<gates::Prompt> prompts);

  // Runs the flags on the first n prompts, interleaved with the baseline; PSNR against the
  // baseline's clip of the same prompt and seed.
  Trial measure(const nlohmann::json& flags, const std::string& label, int64_t n);
  // Runs the flags alone on the first n prompts (a calibration: no baseline, no timing) and returns
  // each run's trace. Not a candidate trial: the budget does not count it.
  std::vector<runtime::Trace> traces(const nlohmann::json& flags, const std::string& label, int64_t n);
  int64_t trials() const { return trials_; }
  // True while another trial fits the budget and no stop was requested.
  bool can_measure(int64_t budget) const { return trials_ < budget && !stop_requested(); }
  // Async-signal-safe: sets a lock-free atomic flag.
  static void request_stop();
  static bool stop_requested();
  const std::vector<gates::Prompt>& prompts() const { return prompts_; }
  int64_t steps() const { return base_.config.steps; }
  bool on_gpu() const { return loaded_.pipeline->precision().device.is_cuda(); }

 private:
  runtime::RuntimeOptions options_of(const nlohmann::json& flags, const std::string& label) const;
  at::Tensor generate(const runtime::RuntimeOptions& o, const gates::Prompt& p, double* seconds,
                      runtime::Trace* trace = nullptr);
  const ExecutorRequest& req_;
  gates::Manifest base_;
  std::vector<gates::Prompt> prompts_;
  runtime::LoadedModel loaded_;
  std::map<std::string, at::Tensor> baseline_clips_;
  std::map<std::string, std::vector<double>> baseline_times_;
  int64_t trials_ = 0;
};

// PSNR (dB, 8-bit peak) between two clips in [0, 1]; 100 for identical.
double clip_psnr(const at::Tensor& a, const at::Tensor& b);

}  // namespace autooptim::executors
