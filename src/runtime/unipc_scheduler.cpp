#include "runtime/unipc_scheduler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/config_json.h"
#include "base/error.h"

namespace autooptim::runtime {
namespace {

// Solves the small dense system A x = b (n <= 3) in float32 with partial pivoting, like LAPACK sgesv.
std::vector<float> solve(std::vector<std::vector<float>> a, std::vector<float> b) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[piv][c])) piv = r;
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    if (a[c][c] == 0.0f) throw Error("UniPC: singular system (repeated sigmas?)");
    for (size_t r = c + 1; r < n; ++r) {
      const float f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  std::vector<float> x(n);
  for (size_t i = n; i-- > 0;) {
    float s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= a[i][k] * x[k];
    x[i] = s / a[i][i];
  }
  return x;
}

// The b vector and B(h) of UniPC's order conditions for hh = -h (predict_x0).
struct PhiTerms {
  float h_phi_1;
  float B_h;
  std::vector<float> b;
};

PhiTerms phi_terms(float hh, int64_t order, bool bh2) {
  PhiTerms t;
  t.h_phi_1 = std::expm1(hh);
  float h_phi_k = t.h_phi_1 / hh - 1.0f;
  float factorial = 1.0f;
  t.B_h = bh2 ? std::expm1(hh) : hh;
  for (int64_t i = 1; i <= order; ++i) {
    t.b.push_back(h_phi_k * factorial / t.B_h);
    factorial *= static_cast<float>(i + 1);
    h_phi_k = h_phi_k / hh - 1.0f / factorial;
  }
  return t;
}

std::vector<std::vector<float>> vandermonde(const std::vector<float>& rks, int64_t order) {
  std::vector<std::vector<float>> r(order, std::vector<float>(rks.size()));
  for (int64_t i = 0; i < order; ++i)
    for (size_t k = 0; k < rks.size(); ++k) r[i][k] = std::pow(rks[k], static_cast<float>(i));
  return r;
}

}  // namespace

UniPCConfig UniPCConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("scheduler config: not a JSON object");
  UniPCConfig c;
  auto require = [&j](const char* key, const nlohmann::json& want) {
    if (j.contains(key) && j[key] != want)
      throw Error(std::string("scheduler config: '") + key + "' = " + j[key].dump() + " is not supported (only " +
                  want.dump() + ")");
  };
  require("prediction_type", "flow_prediction");
  require("use_flow_sigmas", true);
  require("predict_x0", true);
  require("thresholding", false);
  require("use_karras_sigmas", false);
  require("use_exponential_sigmas", false);
  require("use_beta_sigmas", false);
  require("use_dynamic_shifting", false);
  require("timestep_spacing", "linspace");
  require("steps_offset", 0);
  require("rescale_betas_zero_snr", false);
  for (const char* k : {"solver_p", "sigma_min", "sigma_max", "shift_terminal"})
    if (j.contains(k) && !j[k].is_null())
      throw Error(std::string("scheduler config: '") + k + "' is not supported (must be null)");
  const ConfigReader cfg(j, "scheduler");
  cfg.read("num_train_timesteps", c.num_train_timesteps);
  cfg.read("flow_shift", c.flow_shift);
  cfg.read("solver_order", c.solver_order);
  cfg.read("solver_type", c.solver_type);
  cfg.read("lower_order_final", c.lower_order_final);
  cfg.read("final_sigmas_type", c.final_sigmas_type);
  cfg.read("disable_corrector", c.disable_corrector);
  if (c.num_train_timesteps > 1000000) cfg.fail("num_train_timesteps", "is implausibly large (at most 1000000)");
  for (int64_t k : c.disable_corrector)
    if (k < 0 || k > 1000000) cfg.fail("disable_corrector", "holds " + std::to_string(k) + ", not a step index");
  if (c.solver_order < 1 || c.solver_order > 3) throw Error("scheduler config: 'solver_order' must be 1, 2 or 3");
  if (c.solver_type != "bh1" && c.solver_type != "bh2")
    throw Error("scheduler config: 'solver_type' must be bh1 or bh2");
  if (c.final_sigmas_type != "zero" && c.final_sigmas_type != "sigma_min")
    throw Error("scheduler config: 'final_sigmas_type' must be zero or sigma_min");
  if (c.num_train_timesteps < 2) throw Error("scheduler config: 'num_train_timesteps' must be at least 2");
  cfg.positive_finite("flow_shift", c.flow_shift);
  return c;
}

nlohmann::json UniPCConfig::to_json() const {
  return {{"_class_name", "UniPCMultistepScheduler"},
          {"prediction_type", "flow_prediction"},
          {"use_flow_sigmas", true},
          {"predict_x0", true},
          {"num_train_timesteps", num_train_timesteps},
          {"flow_shift", flow_shift},
          {"solver_order", solver_order},
          {"solver_type", solver_type},
          {"lower_order_final", lower_order_final},
          {"final_sigmas_type", final_sigmas_type},
          {"disable_corrector", disable_corrector}};
}

UniPCScheduler::UniPCScheduler(UniPCConfig config) : config_(std::move(config)) {}

void UniPCScheduler::set_timesteps(int64_t steps) {
  if (steps < 1) throw Error("scheduler: the number of steps must be at least 1, got " + std::to_string(steps));
  if (steps >= config_.num_train_timesteps) throw Error("scheduler: too many steps for the training schedule");
  sigmas_.clear();
  timesteps_.clear();
  // s = linspace(1, 1/T, N+1)[:N]; sigma = shift*s / (1 + (shift-1)*s), in float64; the first is kept
  // just below 1 (the reference's 1 - 1e-6) so log(alpha) stays finite.
  const double T = static_cast<double>(config_.num_train_timesteps);
  const double lo = 1.0 / T, shift = config_.flow_shift;
  std::vector<double> sig;
  for (int64_t i = 0; i < steps; ++i) {
    const double s = 1.0 + (lo - 1.0) * static_cast<double>(i) / static_cast<double>(steps);
    sig.push_back(shift * s / (1.0 + (shift - 1.0) * s));
  }
  sig[0] = std::min(sig[0], 1.0 - 1e-6);
  for (double s : sig) {
    timesteps_.push_back(static_cast<int64_t>(s * T));
    sigmas_.push_back(static_cast<float>(s));
  }
  sigmas_.push_back(config_.final_sigmas_type == "zero" ? 0.0f : sigmas_.back());
  model_outputs_.assign(static_cast<size_t>(config_.solver_order), at::Tensor());
  last_sample_ = at::Tensor();
  step_index_ = 0;
  lower_order_nums_ = 0;
  this_order_ = 0;
}

float UniPCScheduler::lambda(int64_t i) const {
  const float sigma = sigmas_.at(static_cast<size_t>(i));
  const float alpha = 1.0f - sigma;
  return std::log(alpha) - std::log(sigma);
}

int64_t UniPCScheduler::next_order() const {
  int64_t order = config_.solver_order;
  if (config_.lower_order_final) order = std::min(order, num_steps() - step_index_);
  return std::min(order, lower_order_nums_ + 1);
}

at::Tensor UniPCScheduler::step(const at::Tensor& model_output, const at::Tensor& sample_in) {
  if (timesteps_.empty()) throw Error("scheduler: set_timesteps was not called");
  if (step_index_ >= num_steps()) throw Error("scheduler: all steps are done");
  const at::Tensor sample = sample_in.to(at::kFloat);
  const float sigma = sigmas_[static_cast<size_t>(step_index_)];
  // Flow prediction -> x0 prediction, from the uncorrected sample.
  const at::Tensor m = sample - sigma * model_output.to(at::kFloat);

  at::Tensor x = sample;
  const bool disabled = std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(),
                                  step_index_ - 1) != config_.disable_corrector.end();
  if (step_index_ > 0 && !disabled && last_sample_.defined()) x = corrector(m, last_sample_, sample, this_order_);

  std::rotate(model_outputs_.begin(), model_outputs_.begin() + 1, model_outputs_.end());
  model_outputs_.back() = m;
  this_order_ = next_order();
  last_sample_ = x;
  at::Tensor next = predictor(x, this_order_);
  if (lower_order_nums_ < config_.solver_order) ++lower_order_nums_;
  ++step_index_;
  return next;
}

at::Tensor UniPCScheduler::predictor(const at::Tensor& x, int64_t order) const {
  const int64_t i = step_index_;
  const at::Tensor& m0 = model_outputs_.back();
  const float sigma_t = sigmas_[static_cast<size_t>(i + 1)], sigma_s0 = sigmas_[static_cast<size_t>(i)];
  // sigma = 0 at the end: lambda = +inf and the update is exactly the x0 prediction.
  if (sigma_t == 0.0f) return m0.clone();
  const float alpha_t = 1.0f - sigma_t;
  const float lambda_s0 = lambda(i);
  const float h = lambda(i + 1) - lambda_s0;
  std::vector<float> rks;
  std::vector<at::Tensor> d1s;
  for (int64_t k = 1; k < order; ++k) {
    const float rk = (lambda(i - k) - lambda_s0) / h;
    rks.push_back(rk);
    d1s.push_back((model_outputs_[model_outputs_.size() - 1 - k] - m0) / rk);
  }
  rks.push_back(1.0f);
  const float hh = -h;
  const PhiTerms t = phi_terms(hh, order, config_.solver_type == "bh2");
  at::Tensor x_t = (sigma_t / sigma_s0) * x - (alpha_t * t.h_phi_1) * m0;
  if (!d1s.empty()) {
    std::vector<float> rhos;
    if (order == 2) {
      rhos = {0.5f};
    } else {
      auto R = vandermonde(rks, order);
      std::vector<std::vector<float>> a(order - 1, std::vector<float>(order - 1));
      for (int64_t r = 0; r < order - 1; ++r)
        for (int64_t c = 0; c < order - 1; ++c) a[r][c] = R[r][c];
      rhos = solve(a, std::vector<float>(t.b.begin(), t.b.end() - 1));
    }
    at::Tensor pred_res = rhos[0] * d1s[0];
    for (size_t k = 1; k < d1s.size(); ++k) pred_res = pred_res + rhos[k] * d1s[k];
    x_t = x_t - (alpha_t * t.B_h) * pred_res;
  }
  return x_t;
}

at::Tensor UniPCScheduler::corrector(const at::Tensor& this_m, const at::Tensor& last_sample,
                                     const at::Tensor& /*this_sample*/, int64_t order) const {
  const int64_t i = step_index_;
  const at::Tensor& m0 = model_outputs_.back();  // the previous step's x0 prediction
  const float sigma_t = sigmas_[static_cast<size_t>(i)], sigma_s0 = sigmas_[static_cast<size_t>(i - 1)];
  const float alpha_t = 1.0f - sigma_t;
  const float lambda_s0 = lambda(i - 1);
  const float h = lambda(i) - lambda_s0;
  std::vector<float> rks;
  std::vector<at::Tensor> d1s;
  for (int64_t k = 1; k < order; ++k) {
    const float rk = (lambda(i - (k + 1)) - lambda_s0) / h;
    rks.push_back(rk);
    d1s.push_back((model_outputs_[model_outputs_.size() - 1 - k] - m0) / rk);
  }
  rks.push_back(1.0f);
  const float hh = -h;
  const PhiTerms t = phi_terms(hh, order, config_.solver_type == "bh2");
  std::vector<float> rhos = order == 1 ? std::vector<float>{0.5f} : solve(vandermonde(rks, order), t.b);
  at::Tensor x_t = (sigma_t / sigma_s0) * last_sample - (alpha_t * t.h_phi_1) * m0;
  at::Tensor corr = rhos.back() * (this_m - m0);
  for (size_t k = 0; k < d1s.size(); ++k) corr = rhos[k] * d1s[k] + corr;
  return x_t - (alpha_t * t.B_h) * corr;
}

}  // namespace autooptim::runtime
