#include "train/trainer.h"
#include "base/json_file.h"

#include <ATen/ATen.h>
#include <torch/types.h>  // clip_grad.h uses torch::Tensor without including it
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/build_info.h"
#include "runtime/checkpoint.h"
#include "runtime/device.h"
#include "base/error.h"
#include "base/log.h"
#include "runtime/models.h"
#include "runtime/safetensors.h"
#include "runtime/tokenizer.h"
#include "runtime/umt5.h"
#include "train/checkpoint_io.h"
#include "train/scenes.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::train {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::AutoencoderKLWan;
using runtime::Precision;
using runtime::WanTransformer3DModel;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// What --resume continues from (train_state/state.json).
struct State {
  std::string stage = "vae";  // vae | dit | done
  int64_t vae_step = 0, dit_step = 0;
  double vae_seconds = 0, dit_seconds = 0, prep_seconds = 0;
  std::vector<double> latents_mean, latents_std;
  // The loss windows of the whole run (a resumed session's summary and train_info.json report the run's
  // first and last losses, not 0 for a stage finished in an earlier session).
  double first_vae_loss = 0, vae_loss = 0, first_dit_loss = 0, dit_loss = 0;
  // The earlier runs this one continues (--vae-from, --transformer-from), kept for a resumed session's record.
  json continued_from = json::object();
  json to_json() const {
    return {{"continued_from", continued_from},
            {"stage", stage},
            {"vae_step", vae_step},
            {"dit_step", dit_step},
            {"vae_seconds", vae_seconds},
            {"dit_seconds", dit_seconds},
            {"prep_seconds", prep_seconds},
            {"latents_mean", latents_mean},
            {"latents_std", latents_std},
            {"losses",
             {{"first_vae", first_vae_loss}, {"vae", vae_loss}, {"first_dit", first_dit_loss}, {"dit", dit_loss}}}};
  }
  static State from_json(const json& j) {
    State s;
    s.stage = j.at("stage").get<std::string>();
    s.vae_step = j.at("vae_step").get<int64_t>();
    s.dit_step = j.at("dit_step").get<int64_t>();
    s.vae_seconds = j.at("vae_seconds").get<double>();
    s.dit_seconds = j.at("dit_seconds").get<double>();
    s.prep_seconds = j.value("prep_seconds", 0.0);
    s.latents_mean = j.at("latents_mean").get<std::vector<double>>();
    s.latents_std = j.at("latents_std").get<std::vector<double>>();
    const json losses = j.value("losses", json::object());  // absent in states written before 2026-12-03
    s.first_vae_loss = losses.value("first_vae", 0.0);
    s.vae_loss = losses.value("vae", 0.0);
    s.first_dit_loss = losses.value("first_dit", 0.0);
    s.dit_loss = losses.value("dit", 0.0);
    s.continued_from = j.value("continued_from", json::object());
    if (s.stage != "vae" && s.stage != "dit" && s.stage != "done") throw Error("stage '" + s.stage + "'");
    return s;
  }
};

// What an earlier run (a checkpoint folder with its train_info.json) that this one continues contributed:
// its folder, command, seed, and the device-minutes taken from it (the VAE's stage for --vae-from, the
// whole run for --transformer-from); minutes null when the folder has no readable train_info.json.
json earlier_run(const std::string& dir, bool vae_only) {
  json e = {{"folder", dir}, {"device_minutes", nullptr}};
  try {
    const json ti = runtime::read_json_file((fs::path(dir) / "train_info.json").string());
    e["device_minutes"] = vae_only ? ti.value("vae_minutes", 0.0) : ti.value("device_minutes", 0.0);
    e["command"] = ti.value("command", "");
    e["seed"] = ti.value("seed", 0);
    if (vae_only) e["final_vae_reconstruction_loss"] = ti.value("final_vae_reconstruction_loss", json(nullptr));
    if (ti.contains("continued_from")) e["continued_from"] = ti["continued_from"];
    // That run's own predecessors count too (a chain of continued runs).
    if (vae_only && ti.contains("continued_from") && ti["continued_from"].contains("vae_from"))
      e["device_minutes"] =
          ti["continued_from"]["vae_from"].value("device_minutes", json(nullptr));  // its VAE came from further back
    if (!vae_only && ti.contains("device_minutes_with_earlier_runs"))
      e["device_minutes"] = ti["device_minutes_with_earlier_runs"];
  } catch (const std::exception&) {
  }
  return e;
}

// The device-minutes of the earlier runs in a continued_from record, the same folder counted once.
double earlier_minutes(const json& continued_from) {
  const json* v = continued_from.contains("vae_from") ? &continued_from["vae_from"] : nullptr;
  const json* t = continued_from.contains("transformer_from") ? &continued_from["transformer_from"] : nullptr;
  auto minutes = [](const json* e) {
    return e && e->at("device_minutes").is_number() ? e->at("device_minutes").get<double>() : 0.0;
  };
  std::error_code ec;
  if (v && t && fs::equivalent(v->at("folder").get<std::string>(), t->at("folder").get<std::string>(), ec))
    return minutes(t);
  return minutes(v) + minutes(t);
}

// Loads one part (vae, transformer) of an earlier run's checkpoint folder into each of `into`, for
// --vae-from and --transformer-from: a missing file or one that does not load is one error naming the flag.
fs::path earlier_part(const std::string& dir, const std::string& part, const std::string& flag) {
  const fs::path src = fs::path(dir) / part / "diffusion_pytorch_model.safetensors";
  if (!fs::exists(src))
    throw Error("train " + flag + ": " + src.string() +
                " does not exist (give a wan22-tiny checkpoint folder, e.g. an earlier --out)");
  return src;
}

void load_earlier_part(std::initializer_list<torch::nn::Module*> into, const std::string& dir, const std::string& part,
                       const std::string& flag, const std::string& mismatch) {
  const fs::path src = earlier_part(dir, part, flag);
  try {
    const auto source = runtime::TensorSource::open(src.string());
    for (auto* m : into) runtime::load_strict(*m, source);
  } catch (const std::exception& e) {
    throw Error("train " + flag + " " + dir + ": " + mismatch + ": " + e.what());
  }
}

void set_trainable(torch::nn::Module& m, bool on) {
  for (auto& p : m.parameters()) p.set_requires_grad(on);
}

// A generator of `device` (the process-wide default one) reseeded: each step's draws depend only on
// (seed, step), so a resumed run draws what an uninterrupted one would have.
at::Generator reseeded(const at::Device& device, uint64_t seed) {
  auto gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  return gen;
}

// Warm-up (100 steps, a tenth of a short run, or 5% of it, whichever ends first) then cosine from lr to lr/10 over
// `progress` in [0, 1].
double lr_at(double lr, int64_t step, double progress, int64_t total_steps) {
  const double warmup = total_steps > 0 ? std::min(100.0, 1.0 + static_cast<double>(total_steps) / 10.0) : 100.0;
  // A time budget on a slow device gives few steps: the warm-up also ends at 5% of the run.
  const double warm = std::min(1.0, std::max(static_cast<double>(step + 1) / warmup, 20.0 * progress));
  const double p = std::clamp(progress, 0.0, 1.0);
  return lr * warm * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * p)));
}

void set_lr(torch::optim::AdamW& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

void replace_file(const fs::path& tmp, const fs::path& dst) { fs::rename(tmp, dst); }

void save_module(const torch::nn::Module& m, const fs::path& path) {
  const fs::path tmp = path.string() + ".tmp";
  runtime::write_safetensors(tmp.string(), named_tensors(m));
  replace_file(tmp, path);
}

template <typename Opt>
void save_optimizer(const Opt& opt, const fs::path& path) {
  const fs::path tmp = path.string() + ".tmp";
  torch::save(opt, tmp.string());
  replace_file(tmp, path);
}

void write_json(const fs::path& path, const json& j) { base::write_json_file(path.string(), j); }

class LossLog {
 public:
  explicit LossLog(const fs::path& path) : f_(path, std::ios::app) {
    if (!f_) throw Error(path.string() + ": cannot write the training log");
  }
  void row(const std::string& stage, int64_t step, double loss, double lr, double seconds,
           const json& extra = json::object()) {
    json j{{"stage", stage}, {"step", step}, {"loss", loss}, {"lr", lr}, {"seconds", seconds}};
    j.update(extra);
    f_ << j.dump() << "\n";
    f_.flush();
  }

 private:
  std::ofstream f_;
};

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

// Refuses options that cannot make a run, before any work.
void check_options(const TrainOptions& o) {
  if (o.out.empty()) throw Error("train: --out DIR is required");
  if (o.device != "cpu" && o.device != "cuda") throw Error("train: --device must be cpu or cuda");
  if (o.device == "cuda" && !runtime::cuda_available())
    throw Error("train: --device cuda but no CUDA device is available to this build");
  if (o.minutes <= 0 && (o.vae_steps < 0 || o.dit_steps < 0))
    throw Error("train: give --minutes (a time budget), or both --vae-steps and --steps");
  if (o.vae_frames < 1 || (o.vae_frames - 1) % 4 || o.frames < 1 || (o.frames - 1) % 4)
    throw Error("train: frame counts must be of the form 4k+1");
  if (o.height % 32 || o.width % 32 || o.height <= 0 || o.width <= 0)
    throw Error("train: height and width must be multiples of 32");
  if (o.vae_batch < 1 || o.dit_batch < 1 || o.scenes < 1) throw Error("train: batches and --scenes must be positive");
  if (!(o.vae_share > 0 && o.vae_share < 1)) throw Error("train: --vae-share must be in (0, 1)");
}

// The device the run trains on; on CUDA with TF32 matmuls and convolutions and cuDNN's autotuner.
at::Device training_device(const TrainOptions& o) {
  const at::Device dev = o.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  if (dev.is_cuda()) {
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
    at::globalContext().setBenchmarkCuDNN(true);
  }
  return dev;
}

// Where the run starts: the state that --resume continues, or a fresh one (state_dir made, the earlier runs
// it continues recorded).
State open_state(const TrainOptions& o, const fs::path& state_dir) {
  State st;
  if (o.resume) {
    if (!fs::exists(state_dir / "state.json"))
      throw Error("train --resume: " + (state_dir / "state.json").string() + " does not exist (nothing to resume)");
    try {
      st = State::from_json(runtime::read_json_file((state_dir / "state.json").string()));
    } catch (const std::exception& e) {
      throw Error((state_dir / "state.json").string() + ": not a training state: " + e.what());
    }
    // A finished run resumed with more steps or minutes continues stage 2 (the stop check ends it
    // again at once when nothing is left).
    if (st.stage == "done") st.stage = "dit";
    log::info("resuming " + o.out + " at stage " + st.stage + " (VAE step " + std::to_string(st.vae_step) +
              ", transformer step " + std::to_string(st.dit_step) + ")");
  } else {
    if (fs::exists(state_dir / "state.json"))
      throw Error("train: " + o.out +
                  " already holds a training run; pass --resume to continue it or choose another --out");
    // Before any work: a wrong --transformer-from would otherwise surface after stage 1 and the data.
    if (!o.vae_from.empty()) earlier_part(o.vae_from, "vae", "--vae-from");
    if (!o.transformer_from.empty()) earlier_part(o.transformer_from, "transformer", "--transformer-from");
    fs::create_directories(state_dir);
    if (!o.vae_from.empty()) st.continued_from["vae_from"] = earlier_run(o.vae_from, true);
    if (!o.transformer_from.empty()) st.continued_from["transformer_from"] = earlier_run(o.transformer_from, false);
  }
  return st;
}

// One training run, as both stages share it: the options, the device and folders, the state that --resume
// continues (st), the loss log, the tiny model's configs and the result so far.
struct TrainRun {
  TrainRun(const TrainOptions& options, Clock::time_point start)
      : o(options),
        t_start(start),
        dev(training_device(o)),
        out(o.out),
        state_dir(out / "train_state"),
        st(open_state(o, state_dir)),
        loss_log(out / "train_log.jsonl"),
        cfg(runtime::tiny_configs()),
        p32{at::kFloat, dev},
        budget(o.minutes * 60.0) {
    res.first_vae_loss = st.first_vae_loss;
    res.vae_loss = st.vae_loss;
    res.first_dit_loss = st.first_dit_loss;
    res.dit_loss = st.dit_loss;
    cfg.vae.base_dim = o.vae_base_dim;
    cfg.vae.decoder_base_dim = o.vae_decoder_base_dim;
  }

  // Whether --session-minutes is up: the stage checkpoints and the run stops, for --resume to continue.
  bool session_over() const {
    return o.session_minutes > 0 &&
           std::chrono::duration<double>(Clock::now() - t_start).count() >= o.session_minutes * 60;
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t_start).count(); }
  // The state to save, with the result's loss windows.
  json state_json() {
    st.first_vae_loss = res.first_vae_loss;
    st.vae_loss = res.vae_loss;
    st.first_dit_loss = res.first_dit_loss;
    st.dit_loss = res.dit_loss;
    return st.to_json();
  }

  const TrainOptions& o;
  const Clock::time_point t_start;
  const at::Device dev;
  const fs::path out, state_dir;
  State st;
  LossLog loss_log;
  TrainResult res;
  runtime::ModelConfigs cfg;
  const Precision p32;
  const double budget;
};

// The VAE before training: the seed's synthetic weights, its residual branches at zero, its posterior narrow.
void init_vae(AutoencoderKLWan& vae, const TrainRun& run) {
  runtime::fill_synthetic(*vae, run.o.seed, "vae.");
  {
    // Residual branches start at zero (the last conv of each residual block, the mid attention's output
    // projection, the resampling convs of the down/up blocks): the untrained VAE is then the
    // parameter-free shortcuts (average pooling down, nearest-neighbour repeats up) between conv_in and
    // conv_out, a blocky but working autoencoder from step 0, instead of a deep random net whose
    // output does not depend on its input (the decoder then learns the mean frame and stays there).
    at::NoGradGuard ng;
    for (auto& kv : vae->named_parameters(true)) {
      const std::string& n = kv.key();
      const bool branch_end =
          n.find(".conv2.") != std::string::npos || n.find("attentions.0.proj.") != std::string::npos ||
          n.find("sampler.resample.1.") != std::string::npos || n.find(".time_conv.") != std::string::npos;
      if (branch_end) kv.value().zero_();
    }
  }
  {
    // Start with a narrow posterior (log-variance about -6): with the random init's variance of about 1
    // the sampled latent is mostly noise, and the decoder first learns to ignore it (outputs the mean).
    at::NoGradGuard ng;
    vae->quant_conv->bias.narrow(0, run.cfg.vae.z_dim, run.cfg.vae.z_dim).fill_(-6.0);
  }
}

// A window's diagnostics, each the mean over its n steps (diag holds their sums).
json window_diagnostics(const at::Tensor& diag, int64_t n) {
  const auto d = (diag / static_cast<double>(std::max<int64_t>(1, n))).to(at::kCPU);
  const float* v = d.data_ptr<float>();
  return json{{"object_mse", v[0]}, {"background_mse", v[1]}, {"logvar", v[2]}, {"mu_std", v[3]}};
}

// One step of stage 1 on a batch of fresh scenes: adds its reconstruction loss to `window` and its diagnostics
// to `diag`, counts the step and its seconds. Returns the learning rate it used.
double vae_step(TrainRun& run, AutoencoderKLWan& vae, torch::optim::AdamW& vae_opt, double vae_budget,
                at::Tensor& window, at::Tensor& diag) {
  const TrainOptions& o = run.o;
  State& st = run.st;
  const at::Device& dev = run.dev;
  const auto t0 = Clock::now();
  std::vector<SceneSpec> scenes;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < o.vae_batch; ++i) {
    const auto index = static_cast<uint64_t>(st.vae_step * o.vae_batch + i);
    scenes.push_back(make_scene(o.seed ^ 0x76616531ull, index, o.mix));
    starts.push_back(static_cast<int64_t>(mix(o.seed ^ 0x77696e64ull ^ (index * 0x100000001b3ull)) %
                                          static_cast<uint64_t>(o.frames - o.vae_frames + 1)));
  }
  // A window of vae_frames of the transformer's clip (o.frames), at its motion per frame: rendering
  // the whole motion into vae_frames would train on objects moving o.frames/vae_frames times
  // faster than in the clips the VAE encodes for the transformer (and the evaluation decodes), each
  // latent frame smearing an object over 4 distant positions.
  const Rendered r = o.vae_frames < o.frames ? render(scenes, o.vae_frames, o.height, o.width, dev, o.frames, starts)
                                             : render(scenes, o.vae_frames, o.height, o.width, dev);
  auto gen = reseeded(dev, mix(o.seed * 31 + 1) ^ static_cast<uint64_t>(st.vae_step));
  const auto [mu, logvar] = vae->encode(r.video);
  const at::Tensor z = mu + at::exp(0.5 * logvar) * at::randn(mu.sizes(), gen, mu.options());
  const at::Tensor rec = vae->decode_unclamped(z);
  const at::Tensor weight = 1 + o.object_weight * r.alpha.unsqueeze(1);
  // Squared error (plus a little L1): it pulls a blurry reconstruction toward the mean of a
  // region, object included, where L1 alone settles on its median (the background) and the small
  // object is the last thing learned.
  const at::Tensor err = rec - r.video;
  const at::Tensor l1 = ((err.pow(2) + 0.2 * err.abs()) * weight).mean() / (1 + o.object_weight * r.alpha.mean());
  const at::Tensor kl = 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).mean();
  const at::Tensor loss = l1 + o.kl_weight * kl;
  double progress_frac = 0;
  if (o.vae_steps > 0) progress_frac = static_cast<double>(st.vae_step) / static_cast<double>(o.vae_steps);
  if (run.budget > 0) progress_frac = std::max(progress_frac, st.vae_seconds / vae_budget);
  const double lr = lr_at(o.vae_lr, st.vae_step, progress_frac, run.budget > 0 ? -1 : o.vae_steps);
  set_lr(vae_opt, lr);
  vae_opt.zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(vae->parameters(), 1.0);
  vae_opt.step();
  window += l1.detach();
  {
    at::NoGradGuard ng;
    const at::Tensor a = r.alpha.unsqueeze(1).expand_as(err), e2 = err.detach().pow(2);
    diag += at::stack({(e2 * a).sum() / a.sum().clamp_min(1), (e2 * (1 - a)).sum() / (1 - a).sum().clamp_min(1),
                       logvar.detach().mean(), mu.detach().std()});
  }
  ++st.vae_step;
  runtime::device_synchronize(dev);
  st.vae_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return lr;
}

// Stage 1's steps, until its step count or its share of the budget is reached (the stage is then "dit") or
// the session is over: false for the latter (checkpointed, run.res filled for train_tiny to return).
bool run_vae_steps(TrainRun& run, AutoencoderKLWan& vae, torch::optim::AdamW& vae_opt,
                   const std::function<void()>& save_vae) {
  const TrainOptions& o = run.o;
  State& st = run.st;
  TrainResult& res = run.res;
  const double vae_budget = run.budget * o.vae_share;
  log::Progress progress;
  at::Tensor window = at::zeros({}, run.p32.fp32_opts());
  // Diagnostics of the window: squared error on the object's pixels and on the background's, the
  // posterior's mean log-variance and the spread of its means (is the latent carrying anything?).
  at::Tensor diag = at::zeros({4}, run.p32.fp32_opts());
  int64_t in_window = 0;
  auto last_ckpt = Clock::now();
  while (st.stage == "vae") {
    const bool steps_done = o.vae_steps >= 0 && st.vae_step >= o.vae_steps;
    const bool time_done = run.budget > 0 && st.vae_seconds >= vae_budget;
    if (steps_done || time_done) {
      if (in_window > 0) {  // the last, partial window of losses
        res.vae_loss = window.item<double>() / static_cast<double>(in_window);
        run.loss_log.row("vae", st.vae_step, res.vae_loss, 0, st.vae_seconds, window_diagnostics(diag, in_window));
      }
      st.stage = "dit";
      save_vae();
      progress.clear();
      log::info(
          fmt("stage 1 (VAE) done: %.0f steps in %.1f min", static_cast<double>(st.vae_step), st.vae_seconds / 60));
      break;
    }
    const double lr = vae_step(run, vae, vae_opt, vae_budget, window, diag);
    ++in_window;
    if (in_window == o.log_every || st.vae_step == 1) {
      const double mean = window.item<double>() / static_cast<double>(in_window);
      if (res.first_vae_loss == 0) res.first_vae_loss = mean;
      res.vae_loss = mean;
      const json dj = window_diagnostics(diag, in_window);
      run.loss_log.row("vae", st.vae_step, mean, lr, st.vae_seconds, dj);
      progress.update("training VAE", fmt("step %.0f  rec %.4f  lr %.2e  %.1f min", static_cast<double>(st.vae_step),
                                          mean, lr, st.vae_seconds / 60) +
                                          fmt("  object mse %.4f  background mse %.4f", dj["object_mse"].get<double>(),
                                              dj["background_mse"].get<double>()));
      window.zero_();
      diag.zero_();
      in_window = 0;
    }
    if (run.session_over()) {
      save_vae();
      progress.clear();
      log::info(fmt(
          "session limit (--session-minutes %.1f) reached in stage 1 at step %.0f: checkpointed; --resume continues",
          o.session_minutes, static_cast<double>(st.vae_step)));
      res.vae_steps = st.vae_step;
      res.seconds = run.seconds();
      return false;
    }
    if (std::chrono::duration<double>(Clock::now() - last_ckpt).count() > o.checkpoint_minutes * 60) {
      save_vae();
      last_ckpt = Clock::now();
    }
  }
  return true;
}

// Stage 1: the VAE trained (from where an earlier session stopped, with --resume), or taken from --vae-from.
// False when the session limit stopped the run in it.
bool train_vae(TrainRun& run, AutoencoderKLWan& vae) {
  const TrainOptions& o = run.o;
  State& st = run.st;
  if (st.vae_step > 0 || st.stage != "vae")
    runtime::load_strict(*vae, runtime::TensorSource::open((run.state_dir / "vae.safetensors").string()));
  set_trainable(*vae, true);
  torch::optim::AdamW vae_opt(
      vae->parameters(), torch::optim::AdamWOptions(o.vae_lr).betas(std::make_tuple(0.9, 0.99)).weight_decay(1e-4));
  if (st.vae_step > 0 && st.stage == "vae") torch::load(vae_opt, (run.state_dir / "vae_optim.pt").string(), run.dev);
  auto save_vae = [&] {
    save_module(*vae, run.state_dir / "vae.safetensors");
    save_optimizer(vae_opt, run.state_dir / "vae_optim.pt");
    write_json(run.state_dir / "state.json", run.state_json());
  };
  if (!o.vae_from.empty() && !o.resume) {
    // Stage 1 taken from an earlier run's trained VAE: the whole budget goes to the transformer.
    load_earlier_part({&*vae}, o.vae_from, "vae", "--vae-from",
                      "its VAE does not load as one of --vae-width " + std::to_string(o.vae_base_dim) +
                          " and --vae-decoder-width " + std::to_string(o.vae_decoder_base_dim) +
                          " (the widths must match)");
    st.stage = "dit";
    save_module(*vae, run.state_dir / "vae.safetensors");  // where --resume reads the VAE of stage 2 from
    log::info("stage 1 skipped: the VAE of " + o.vae_from);
  }
  return run_vae_steps(run, vae, vae_opt, save_vae);
}

// Stage 2's data set, made once: each scene's latents and the embedding of its caption.
struct DitData {
  at::Tensor x0_all;         // [N, z, T', h, w] posterior means, normalised by latents_mean/std
  at::Tensor scene_caption;  // [N] the row of emb that holds scene i's caption
  at::Tensor emb;            // [U, 512, text_dim] the distinct captions' embeddings
  at::Tensor null_emb;       // CFG's negative prompt
};

// The scenes encoded with the trained VAE, in chunks: [N, z, T', h, w] raw (un-normalised) posterior means.
at::Tensor encode_scenes(const TrainRun& run, AutoencoderKLWan& vae, const std::vector<SceneSpec>& all) {
  const TrainOptions& o = run.o;
  at::NoGradGuard ng;
  const int64_t chunk = run.dev.is_cuda() ? 32 : 4;
  std::vector<at::Tensor> parts;
  for (int64_t i = 0; i < o.scenes; i += chunk) {
    std::vector<SceneSpec> batch(all.begin() + i, all.begin() + std::min(o.scenes, i + chunk));
    parts.push_back(vae->encode(render(batch, o.frames, o.height, o.width, run.dev).video).first);
  }
  return at::cat(parts, 0);
}

// The latents normalised; latents_mean/std set first from them when the state has none yet.
at::Tensor normalised_latents(TrainRun& run, const at::Tensor& lat) {
  State& st = run.st;
  if (st.latents_mean.empty()) {
    // latents_mean/std per channel from the data, as the real VAE's config carries them.
    const at::Tensor m = lat.mean({0, 2, 3, 4}).to(at::kCPU, at::kDouble);
    const at::Tensor s = lat.std({0, 2, 3, 4}, /*unbiased=*/false).clamp_min(1e-3).to(at::kCPU, at::kDouble);
    st.latents_mean.assign(m.data_ptr<double>(), m.data_ptr<double>() + m.numel());
    st.latents_std.assign(s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
  }
  const at::Tensor lmean = at::tensor(st.latents_mean, at::kDouble).to(run.p32.fp32_opts()).view({1, -1, 1, 1, 1});
  const at::Tensor lstd = at::tensor(st.latents_std, at::kDouble).to(run.p32.fp32_opts()).view({1, -1, 1, 1, 1});
  return ((lat - lmean) / lstd).contiguous();
}

// Stage 2's data set: the scenes rendered and encoded, their captions embedded with the frozen text encoder.
// The seconds since t_prep count as the run's data preparation.
DitData prepare_dit_data(TrainRun& run, AutoencoderKLWan& vae, runtime::UMT5EncoderModel& text,
                         const runtime::Tokenizer& tok, Clock::time_point t_prep) {
  const TrainOptions& o = run.o;
  DitData data;
  std::vector<std::string> captions;
  std::map<std::string, int64_t> caption_index;
  data.scene_caption = at::empty({o.scenes}, at::kLong);
  std::vector<SceneSpec> all;
  for (int64_t i = 0; i < o.scenes; ++i) {
    all.push_back(make_scene(o.seed, static_cast<uint64_t>(i), o.mix));
    auto [it, fresh] = caption_index.emplace(all.back().caption, static_cast<int64_t>(captions.size()));
    if (fresh) captions.push_back(all.back().caption);
    data.scene_caption[i] = it->second;
  }
  data.x0_all = normalised_latents(run, encode_scenes(run, vae, all));
  {
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < captions.size(); i += 64) {
      std::vector<std::string> c(captions.begin() + static_cast<long>(i),
                                 captions.begin() + static_cast<long>(std::min(captions.size(), i + 64)));
      parts.push_back(runtime::encode_prompts(text, tok, c, 512, at::kFloat).clone());
    }
    data.emb = at::cat(parts, 0);
    data.null_emb = runtime::encode_prompts(text, tok, {""}, 512, at::kFloat).clone();
  }
  runtime::device_synchronize(run.dev);
  const double prep = std::chrono::duration<double>(Clock::now() - t_prep).count();
  run.st.prep_seconds += prep;
  log::info(fmt("stage 2 data: %.0f scenes (%.0f distinct captions) encoded in %.1f s", static_cast<double>(o.scenes),
                static_cast<double>(captions.size()), prep));
  return data;
}

// The transformer and its EMA at the start of stage 2: the seed's synthetic weights with a zero head, or
// the weights where an earlier session (--resume) or run (--transformer-from) left them.
void init_transformers(const TrainRun& run, WanTransformer3DModel& dit, WanTransformer3DModel& ema) {
  const TrainOptions& o = run.o;
  for (auto* m : {&dit, &ema}) {
    runtime::fill_synthetic(**m, o.seed, "transformer.");
    at::NoGradGuard ng;
    (*m)->proj_out->weight.zero_();  // start from a zero velocity: the head learns first
    (*m)->proj_out->bias.zero_();
  }
  if (run.st.dit_step > 0 || run.st.stage == "done") {
    runtime::load_strict(*dit, runtime::TensorSource::open((run.state_dir / "transformer.safetensors").string()));
    runtime::load_strict(*ema, runtime::TensorSource::open((run.state_dir / "transformer_ema.safetensors").string()));
  } else if (!o.transformer_from.empty()) {
    // Continue an earlier run's transformer: its exported (EMA) weights start both the trained weights
    // and their EMA; the optimiser's moments and the learning-rate schedule start afresh.
    load_earlier_part({&*dit, &*ema}, o.transformer_from, "transformer", "--transformer-from",
                      "its transformer does not load as wan22-tiny's");
    log::info("stage 2 starts from the transformer of " + o.transformer_from);
  }
}

// One step of stage 2 on a batch drawn from the data set: updates the EMA (ema_params from params), adds the
// loss to `window`, counts the step and its seconds. `used`: the run's seconds before the step. Returns the
// learning rate it used.
double dit_step(TrainRun& run, const DitData& data, WanTransformer3DModel& dit, torch::optim::AdamW& dit_opt,
                const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& ema_params, double used,
                at::Tensor& window) {
  const TrainOptions& o = run.o;
  State& st = run.st;
  const at::Device& dev = run.dev;
  const double budget = run.budget;
  const double shift = run.cfg.scheduler.flow_shift;
  const int64_t N = o.scenes, B = o.dit_batch;
  const auto t0 = Clock::now();
  auto g = at::detail::createCPUGenerator(mix(o.seed * 131 + 7) ^ static_cast<uint64_t>(st.dit_step));
  const at::Tensor idx = at::randint(N, {B}, g, at::kLong);
  const at::Tensor s = at::rand({B}, g, at::kFloat);
  const at::Tensor drop = (at::rand({B}, g, at::kFloat) < o.cfg_dropout).to(dev).view({B, 1, 1});
  // The scheduler's shift of the uniform sigma: sigma = shift s / (1 + (shift - 1) s).
  const at::Tensor sigma = (shift * s / (1 + (shift - 1) * s)).to(dev);
  const at::Tensor x0 = data.x0_all.index_select(0, idx.to(dev));
  at::Tensor ctx = data.emb.index_select(0, data.scene_caption.index_select(0, idx).to(dev));
  ctx = at::where(drop, data.null_emb.expand_as(ctx), ctx);
  auto gen = reseeded(dev, mix(o.seed * 977 + 3) ^ static_cast<uint64_t>(st.dit_step));
  const at::Tensor noise = at::randn(x0.sizes(), gen, x0.options());
  const at::Tensor sv = sigma.view({B, 1, 1, 1, 1});
  const at::Tensor xt = (1 - sv) * x0 + sv * noise;
  const at::Tensor pred = dit->forward(xt, sigma * 1000.0, ctx);
  const at::Tensor loss = (pred.to(at::kFloat) - (noise - x0)).pow(2).mean();
  double progress_frac = 0;
  if (o.dit_steps > 0) progress_frac = static_cast<double>(st.dit_step) / static_cast<double>(o.dit_steps);
  if (budget > 0)
    progress_frac = std::max(progress_frac, (used - st.vae_seconds) / std::max(1.0, budget - st.vae_seconds));
  const double lr = lr_at(o.dit_lr, st.dit_step, progress_frac, budget > 0 ? -1 : o.dit_steps);
  set_lr(dit_opt, lr);
  dit_opt.zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(params, 1.0);
  dit_opt.step();
  {
    at::NoGradGuard ng;
    const double d =
        std::min(o.ema_decay, (1.0 + static_cast<double>(st.dit_step)) / (10.0 + static_cast<double>(st.dit_step)));
    for (size_t i = 0; i < params.size(); ++i) ema_params[i].mul_(d).add_(params[i].detach(), 1 - d);
  }
  window += loss.detach();
  ++st.dit_step;
  runtime::device_synchronize(dev);
  st.dit_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return lr;
}

// Stage 2's steps, until its step count or the run's budget is reached (the stage is then "done") or the
// session is over (or --stop-at-step reached): false for the latter (checkpointed, run.res filled for
// train_tiny to return).
bool run_dit_steps(TrainRun& run, const DitData& data, WanTransformer3DModel& dit, WanTransformer3DModel& ema,
                   torch::optim::AdamW& dit_opt, const std::function<void()>& save_dit) {
  const TrainOptions& o = run.o;
  State& st = run.st;
  TrainResult& res = run.res;
  const std::vector<at::Tensor> params = dit->parameters(), ema_params = ema->parameters();
  log::Progress progress;
  at::Tensor window = at::zeros({}, run.p32.fp32_opts());
  int64_t in_window = 0;
  auto last_ckpt = Clock::now();
  while (st.stage == "dit") {
    const double used = st.vae_seconds + st.prep_seconds + st.dit_seconds;
    const bool steps_done = o.dit_steps >= 0 && st.dit_step >= o.dit_steps;
    const bool time_done = run.budget > 0 && used >= run.budget;
    if (steps_done || time_done) {
      if (in_window > 0) {
        res.dit_loss = window.item<double>() / static_cast<double>(in_window);
        run.loss_log.row("dit", st.dit_step, res.dit_loss, 0, st.dit_seconds);
      }
      st.stage = "done";
      save_dit();
      progress.clear();
      log::info(fmt("stage 2 (transformer) done: %.0f steps in %.1f min", static_cast<double>(st.dit_step),
                    st.dit_seconds / 60));
      break;
    }
    const double lr = dit_step(run, data, dit, dit_opt, params, ema_params, used, window);
    ++in_window;
    if (in_window == o.log_every || st.dit_step == 1) {
      const double mean = window.item<double>() / static_cast<double>(in_window);
      if (res.first_dit_loss == 0) res.first_dit_loss = mean;
      res.dit_loss = mean;
      run.loss_log.row("dit", st.dit_step, mean, lr, st.dit_seconds);
      progress.update("training transformer", fmt("step %.0f  loss %.4f  lr %.2e  %.1f min",
                                                  static_cast<double>(st.dit_step), mean, lr, st.dit_seconds / 60));
      window.zero_();
      in_window = 0;
    }
    if (run.session_over() || (o.stop_at_step > 0 && st.dit_step >= o.stop_at_step)) {
      save_dit();
      progress.clear();
      log::info(fmt(
          "session limit (--session-minutes %.1f) reached in stage 2 at step %.0f: checkpointed; --resume continues",
          o.session_minutes, static_cast<double>(st.dit_step)));
      res.vae_steps = st.vae_step;
      res.dit_steps = st.dit_step;
      res.seconds = run.seconds();
      return false;
    }
    if (std::chrono::duration<double>(Clock::now() - last_ckpt).count() > o.checkpoint_minutes * 60) {
      save_dit();
      last_ckpt = Clock::now();
    }
  }
  return true;
}

// Stage 2: the transformer trained (from where an earlier session stopped, with --resume); each checkpoint
// also writes the model folder (the EMA's weights, the VAE, the text encoder). False when the session limit
// stopped the run in it.
bool train_dit(TrainRun& run, AutoencoderKLWan& vae, runtime::UMT5EncoderModel& text, const DitData& data) {
  const TrainOptions& o = run.o;
  State& st = run.st;
  WanTransformer3DModel dit(run.cfg.transformer, run.p32), ema(run.cfg.transformer, run.p32);
  init_transformers(run, dit, ema);
  set_trainable(*dit, true);
  torch::optim::AdamW dit_opt(
      dit->parameters(), torch::optim::AdamWOptions(o.dit_lr).betas(std::make_tuple(0.9, 0.99)).weight_decay(0.01));
  if (st.dit_step > 0 && st.stage == "dit") torch::load(dit_opt, (run.state_dir / "dit_optim.pt").string(), run.dev);
  auto vae_cfg = run.cfg.vae;
  vae_cfg.latents_mean = st.latents_mean;
  vae_cfg.latents_std = st.latents_std;
  auto save_dit = [&] {
    save_module(*dit, run.state_dir / "transformer.safetensors");
    save_module(*ema, run.state_dir / "transformer_ema.safetensors");
    save_optimizer(dit_opt, run.state_dir / "dit_optim.pt");
    write_json(run.state_dir / "state.json", run.state_json());
    TinyCheckpoint ck{&*ema, &*vae, &*text, run.cfg.transformer, vae_cfg, run.cfg.text_encoder, run.cfg.scheduler};
    write_tiny_checkpoint(run.out.string(), ck);
  };
  if (!run_dit_steps(run, data, dit, ema, dit_opt, save_dit)) return false;
  if (st.stage == "done" && !fs::exists(run.out / "model_index.json")) save_dit();
  return true;
}

// train_info.json of the finished run: what made it, its device-minutes (with the earlier runs it continues),
// its final losses and options.
void write_train_info(const TrainRun& run) {
  const TrainOptions& o = run.o;
  const State& st = run.st;
  const double total = st.vae_seconds + st.prep_seconds + st.dit_seconds;
  json info = {{"command", o.command_line},
               {"seed", o.seed},
               {"device", o.device},
               {"device_name", runtime::device_name(run.dev)},
               {"build", runtime::build_info_text()},
               {"vae_steps", st.vae_step},
               {"transformer_steps", st.dit_step},
               {"vae_minutes", st.vae_seconds / 60},
               {"data_minutes", st.prep_seconds / 60},
               {"transformer_minutes", st.dit_seconds / 60},
               {"device_minutes", total / 60},
               {"continued_from", st.continued_from},
               {"device_minutes_with_earlier_runs", total / 60 + earlier_minutes(st.continued_from)},
               {"final_vae_reconstruction_loss",
                st.vae_step > 0 ? json(run.res.vae_loss) : json(nullptr)},  // --vae-from: see continued_from
               {"final_transformer_loss", run.res.dit_loss},
               {"options",
                {{"minutes", o.minutes},
                 {"vae_share", o.vae_share},
                 {"vae_batch", o.vae_batch},
                 {"vae_frames", o.vae_frames},
                 {"dit_batch", o.dit_batch},
                 {"scenes", o.scenes},
                 {"frames", o.frames},
                 {"height", o.height},
                 {"width", o.width},
                 {"vae_base_dim", o.vae_base_dim},
                 {"vae_decoder_base_dim", o.vae_decoder_base_dim},
                 {"vae_lr", o.vae_lr},
                 {"dit_lr", o.dit_lr},
                 {"kl_weight", o.kl_weight},
                 {"object_weight", o.object_weight},
                 {"ema_decay", o.ema_decay},
                 {"cfg_dropout", o.cfg_dropout},
                 {"flow_shift", run.cfg.scheduler.flow_shift},
                 {"vertical_share", o.mix.vertical_share}}}};
  write_json(run.out / "train_info.json", info);
  log::info(fmt("training done: %.1f device-minutes in all (VAE %.1f, data %.1f, transformer %.1f)", total / 60,
                st.vae_seconds / 60, st.prep_seconds / 60, st.dit_seconds / 60));
}

}  // namespace

TrainResult train_tiny(const TrainOptions& o) {
  const auto t_start = Clock::now();
  check_options(o);
  TrainRun run(o, t_start);

  // ---------------------------------------------------------------------------------------------
  // Stage 1: the VAE.
  AutoencoderKLWan vae(run.cfg.vae, run.p32);
  init_vae(vae, run);
  if (!train_vae(run, vae)) return run.res;
  set_trainable(*vae, false);
  run.res.vae_steps = run.st.vae_step;

  // ---------------------------------------------------------------------------------------------
  // Stage 2 data: scenes rendered once, encoded with the trained VAE, captions embedded once.
  const auto t_prep = Clock::now();
  runtime::Tokenizer tok = runtime::Tokenizer::from_serialized(runtime::tiny_tokenizer_model());
  runtime::UMT5EncoderModel text(run.cfg.text_encoder, run.p32);
  runtime::fill_synthetic(*text, 1, "text_encoder.");  // frozen: the same random encoder as the synthetic model
  const DitData data = prepare_dit_data(run, vae, text, tok, t_prep);

  // ---------------------------------------------------------------------------------------------
  // Stage 2: the transformer.
  if (!train_dit(run, vae, text, data)) return run.res;
  run.res.dit_steps = run.st.dit_step;
  run.res.seconds = run.seconds();
  run.res.finished = true;
  write_train_info(run);
  return run.res;
}

}  // namespace autooptim::train
