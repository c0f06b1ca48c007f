#pragma once
// UniPCMultistepScheduler (diffusers) in its flow-matching form, as Wan2.2 uses it: flow_prediction,
// use_flow_sigmas, predict_x0, bh1/bh2, corrector on every step after the first.
// Scalars are computed in float32 exactly in the order the reference computes them; the sample is
// float32 whatever the model's dtype.
#include <ATen/ATen.h>

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace autooptim::runtime {

struct UniPCConfig {
  int64_t num_train_timesteps = 1000;
  double flow_shift = 5.0;
  int64_t solver_order = 2;
  std::string solver_type = "bh2";
  bool lower_order_final = true;
  std::string final_sigmas_type = "zero";  // or "sigma_min"
  std::vector<int64_t> disable_corrector;

  // Reads scheduler_config.json; settings we do not implement (another prediction type, karras
  // sigmas, thresholding, dynamic shifting) are errors naming the key.
  static UniPCConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
};

class UniPCScheduler {
 public:
  explicit UniPCScheduler(UniPCConfig config = {});

  // Resets the state and builds the schedule for `steps` denoising steps.
  void set_timesteps(int64_t steps);
  const std::vector<float>& sigmas() const { return sigmas_; }          // steps + 1, last is 0 (or sigma_min)
  const std::vector<int64_t>& timesteps() const { return timesteps_; }  // steps, what the model is given
  int64_t step_index() const { return step_index_; }
  int64_t num_steps() const { return static_cast<int64_t>(timesteps_.size()); }

  // One step: model_output is the flow velocity at sample; returns the next sample (float32).
  at::Tensor step(const at::Tensor& model_output, const at::Tensor& sample);

  // The predictor order the next step() will use (1 at the first and, with lower_order_final, last steps).
  int64_t next_order() const;

  const UniPCConfig& config() const { return config_; }

 private:
  at::Tensor predictor(const at::Tensor& sample, int64_t order) const;
  at::Tensor corrector(const at::Tensor& this_m, const at::Tensor& last_sample, const at::Tensor& this_sample,
                       int64_t order) const;
  float lambda(int64_t i) const;

  UniPCConfig config_;
  std::vector<float> sigmas_;
  std::vector<int64_t> timesteps_;
  std::vector<at::Tensor> model_outputs_;  // last solver_order converted outputs (x0 predictions), oldest first
  at::Tensor last_sample_;
  int64_t step_index_ = 0;
  int64_t lower_order_nums_ = 0;
  int64_t this_order_ = 0;
};

}  // namespace autooptim::runtime
