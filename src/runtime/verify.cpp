#include "runtime/verify.h"

#include "runtime/forward_context.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "runtime/config_json.h"
#include "base/error.h"
#include "runtime/unipc_scheduler.h"

namespace fs = std::filesystem;

namespace autooptim::runtime {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Component kinds by the pair's name prefix. Pairs whose kind is not listed are reported as skipped.
const std::vector<std::pair<std::string, Verifier>>& verifiers() {
  static const std::vector<std::pair<std::string, Verifier>> r = {
      {"transformer", verify_transformer},
      {"unipc", verify_unipc},
      {"vae", verify_vae},
      {"umt5", verify_umt5},
      {"pipeline", verify_pipeline},
      {"a14b_pipeline", verify_a14b_pipeline},
  };
  return r;
}

}  // namespace

namespace {

// The "config" object of a golden component's json.
nlohmann::json golden_config(const std::string& json) {
  const auto j = read_json_file(json);
  if (!j.contains("config")) throw CheckpointError(json + ": no 'config' object");
  return j["config"];
}

}  // namespace

WanTransformer3DModel load_golden_transformer(const std::string& json, const std::string& weights, const Precision& p) {
  const auto cfg = golden_config(json);
  WanTransformer3DModel model(with_config_file(json, [&] { return WanTransformerConfig::from_json(cfg); }), p);
  load_strict(*model, TensorSource::open(weights));
  return model;
}

AutoencoderKLWan load_golden_vae(const std::string& json, const std::string& weights, const at::Device& device) {
  const auto cfg = golden_config(json);
  AutoencoderKLWan vae(with_config_file(json, [&] { return WanVAEConfig::from_json(cfg); }),
                       Precision{at::kFloat, device});
  load_strict(*vae, TensorSource::open(weights));
  return vae;
}

std::string golden_sibling(const std::string& json_path, const std::string& name, const std::string& what) {
  if (name.empty() || name[0] == '.' || name.size() > 128 ||
      name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos)
    throw CheckpointError(json_path + ": '" + what +
                          "' must name a file in the same folder ([A-Za-z0-9._-], no leading dot)");
  return (fs::path(json_path).parent_path() / name).string();
}

void verify_transformer(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  WanTransformer3DModel model = load_golden_transformer(p.weights_json, p.weights, o.precision);
  const auto io = TensorSource::open(p.io);
  const auto dev = o.precision.device;
  const at::Tensor x = io.tensor("hidden_states").to(dev);
  const at::Tensor ctx = io.tensor("encoder_hidden_states").to(dev);
  at::InferenceMode guard;
  if (io.contains("timestep_per_token")) {
    const at::Tensor t = io.tensor("timestep_per_token").to(dev);
    Intermediates inter;
    Trace trace;
    ForwardContext fc;
    fc.options = &o.options;
    fc.trace = &trace;
    const at::Tensor out = model->forward(x, t, ctx, &inter, &fc);
    rep.rows.push_back(compare(p.name, "output", out, io.tensor("output"), o.tolerance));
    for (const auto& name : io.names()) {
      if (name.rfind("inter.", 0) != 0) continue;
      const std::string key = name.substr(6);
      auto it = inter.find(key);
      if (it == inter.end()) {
        rep.rows.push_back({p.name, name, std::numeric_limits<double>::infinity(), 0, o.tolerance, false});
        continue;
      }
      rep.rows.push_back(compare(p.name, name, it->second, io.tensor(name), o.tolerance));
    }
  }
  if (io.contains("output_scalar_timestep")) {
    // One timestep per sample: the reference's value is that of the tokens past the first latent frame.
    at::Tensor t =
        io.contains("timestep") ? io.tensor("timestep") : io.tensor("timestep_per_token").select(1, -1).contiguous();
    Trace trace;
    ForwardContext fc;
    fc.options = &o.options;
    fc.trace = &trace;
    const at::Tensor out = model->forward(x, t.to(dev), ctx, nullptr, &fc);
    rep.rows.push_back(
        compare(p.name, "output_scalar_timestep", out, io.tensor("output_scalar_timestep"), o.tolerance));
  }
}

void verify_unipc(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  const auto j = read_json_file(p.io_json);
  const auto cfg = with_config_file(
      p.io_json, [&] { return UniPCConfig::from_json(j.contains("config") ? j["config"] : nlohmann::json::object()); });
  const auto io = TensorSource::open(p.io);
  std::vector<int64_t> counts;
  for (const auto& n : io.names()) {
    if (n.rfind("timesteps_", 0) != 0) continue;
    const std::string digits = n.substr(10);
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(digits) < 1 || std::stoll(digits) > 1000)
      throw CheckpointError(p.io + ": tensor '" + n + "' does not name a step count (timesteps_N, N in 1..1000)");
    counts.push_back(std::stoll(digits));
  }
  if (counts.empty()) throw CheckpointError(p.io + ": no timesteps_N tensors");
  std::sort(counts.begin(), counts.end());
  for (int64_t n : counts) {
    const std::string s = std::to_string(n);
    UniPCScheduler sched(cfg);
    sched.set_timesteps(n);
    std::vector<float> ts(sched.timesteps().begin(), sched.timesteps().end());
    rep.rows.push_back(compare(p.name, "timesteps_" + s, at::tensor(ts), io.tensor("timesteps_" + s), o.tolerance));
    rep.rows.push_back(
        compare(p.name, "sigmas_" + s, at::tensor(sched.sigmas()), io.tensor("sigmas_" + s), o.tolerance));
    at::Tensor x = io.tensor("sample0_" + s).to(o.precision.device);
    std::vector<at::Tensor> samples;
    for (int64_t i = 0; i < n; ++i) {
      x = sched.step(io.tensor("model_output_" + s + "_" + std::to_string(i)).to(o.precision.device), x);
      samples.push_back(x);
    }
    rep.rows.push_back(compare(p.name, "samples_" + s, at::stack(samples), io.tensor("samples_" + s), o.tolerance));
  }
}

bool VerifyReport::all_pass() const {
  return !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const VerifyRow& r) { return r.pass; });
}

VerifyRow compare(const std::string& component, const std::string& name, const at::Tensor& ours, const at::Tensor& ref,
                  double tolerance) {
  VerifyRow row{component, name, 0, 0, tolerance, false};
  row.rel_l2 = rel_l2(ours, ref);
  if (ours.sizes() == ref.sizes()) {
    const at::Tensor d = (ours.detach().to(at::kCPU, at::kDouble) - ref.to(at::kDouble)).abs();
    row.max_abs = d.numel() ? d.max().item<double>() : 0.0;
    if (!std::isfinite(row.max_abs)) row.max_abs = std::numeric_limits<double>::infinity();
  } else {
    row.max_abs = std::numeric_limits<double>::infinity();
  }
  row.pass = row.rel_l2 <= tolerance;
  return row;
}

VerifyReport verify_golden_dir(const std::string& dir, const VerifyOptions& opts) {
  if (!fs::is_directory(dir)) throw Error(dir + ": not a folder");
  std::vector<GoldenPair> pairs;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    const std::string suffix = "_io.safetensors";
    if (f.size() <= suffix.size() || f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    GoldenPair p;
    p.name = f.substr(0, f.size() - suffix.size());
    p.io = e.path().string();
    p.io_json = (fs::path(dir) / (p.name + "_io.json")).string();
    p.weights = (fs::path(dir) / (p.name + "_weights.safetensors")).string();
    p.weights_json = (fs::path(dir) / (p.name + "_weights.json")).string();
    pairs.push_back(p);
  }
  std::sort(pairs.begin(), pairs.end(), [](const GoldenPair& a, const GoldenPair& b) { return a.name < b.name; });
  if (pairs.empty()) throw Error(dir + ": no <name>_io.safetensors files");
  VerifyReport rep;
  for (const auto& p : pairs) {
    Verifier run = nullptr;
    for (const auto& [prefix, fn] : verifiers())
      if (starts_with(p.name, prefix)) run = fn;
    if (!run) {
      rep.skipped.push_back(p.name + ": no verifier for this component kind in this build");
      continue;
    }
    // unipc has no weights; a14b_pipeline's io json names its own.
    const bool own_weights = !starts_with(p.name, "unipc") && !starts_with(p.name, "a14b_pipeline");
    if (own_weights && (!fs::exists(p.weights) || !fs::exists(p.weights_json)))
      throw Error(p.io + ": its weights (" + p.weights + ", " + p.weights_json + ") are missing");
    VerifyOptions o = opts;
    const size_t rows_before = rep.rows.size();
    if (!starts_with(p.name, "transformer")) {
      o.precision.compute = at::kFloat;
      o.tolerance = opts.fp32_tolerance;
    }
    if (starts_with(p.name, "pipeline") || starts_with(p.name, "a14b_pipeline")) o.tolerance = opts.fp32_tolerance * 10;
    run(p, o, rep);
    // A pair whose io file holds none of the outputs its verifier compares checked nothing: that is a
    // failure, not a pass.
    if (rep.rows.size() == rows_before)
      rep.rows.push_back({p.name, "(no expected outputs in " + fs::path(p.io).filename().string() + ")",
                          std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), o.tolerance,
                          false});
  }
  return rep;
}

}  // namespace autooptim::runtime
