#include "gates/worker.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include "gates/generate_params.h"
#include "gates/drawn_request.h"
#include "gates/integrity.h"
#include "gates/plugin_schema.h"
#include "base/sha256.h"
#include "redteam/redteam.h"
#include "runtime/device.h"
#include "base/error.h"
#include "runtime/torch_compat.h"

namespace autooptim::gates {

namespace {

// libtorch's pools start with their first use: its own parallel kernels (an elementwise op and a reduction
// big enough to use every intra-op thread: libtorch's OpenMP pool, whatever our own objects are built with)
// and a small GEMM (BLAS's own pool where it has one; the device's handles on a GPU). Started here, they
// are alive before the first generation and so count among the harness's threads.
void warm_compute_pools(at::Device device) {
  const at::Tensor big = at::ones({int64_t{1} << 22}, at::TensorOptions().dtype(at::kFloat));
  (void)(big * 2.0f).sum().item<float>();
  const at::Tensor a = at::ones({256, 256}, at::TensorOptions().dtype(at::kFloat));
  (void)at::mm(a, a).sum().item<float>();
  if (device.is_cuda()) (void)at::mm(a.to(device), a.to(device)).sum().item<float>();
}

}  // namespace

Worker::Worker(const runtime::LoadRequest& request) : request_(request) {
  loaded_ = runtime::load_model(request_);
  warm_compute_pools(device());
  capture_harness_threads();
}

Worker::~Worker() { allow_redteam(false); }

void Worker::allow_redteam(bool allowed) {
  redteam_allowed_ = allowed;
  if (allowed) return;
  for (auto& [pipe, team] : redteams_) pipe->set_interceptor(nullptr);
  redteams_.clear();
}

ParseOptions Worker::parse_options() const {
  ParseOptions o;
  o.allow_redteam = redteam_allowed_;
  return o;
}

void Worker::arm_redteam(runtime::WanPipeline& pipe, const Manifest& m) {
  if (!redteam_allowed_) {
    if (redteam::any_on(m.redteam))
      throw Error("manifest '" + m.id + "' sets red-team switches, which this worker does not allow");
    return;
  }
  std::unique_ptr<redteam::RedTeam>& team = redteams_[&pipe];
  if (!team) {
    team = std::make_unique<redteam::RedTeam>();
    pipe.set_interceptor(team.get());
  }
  team->set_switches(m.redteam);
}

const std::string& Worker::build_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/self/exe", std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return sha256_hex(s.str()).substr(0, 16);
  }();
  return id;
}

bool Worker::baseline_clip_verified(const std::string& file, const std::string& digest) const {
  const auto it = verified_baseline_clips_.find(file);
  return it != verified_baseline_clips_.end() && it->second == digest;
}

void Worker::mark_baseline_clip_verified(const std::string& file, const std::string& digest) {
  verified_baseline_clips_[file] = digest;
}

const std::vector<double>& Worker::baseline_run_seconds(const std::string& baseline_hash) const {
  static const std::vector<double> none;
  const auto it = baseline_runs_.find(baseline_hash);
  return it == baseline_runs_.end() ? none : it->second;
}

void Worker::record_baseline_run(const std::string& baseline_hash, double seconds) {
  auto& runs = baseline_runs_[baseline_hash];
  runs.push_back(seconds);
  if (runs.size() > kBaselineRunsKept) runs.erase(runs.begin());
}

double Worker::peak_tflops() {
  if (peak_tflops_ > 0) return peak_tflops_;
  const auto& p = request_.precision;
  const int64_t n = p.device.is_cuda() ? 8192 : 1024;
  at::InferenceMode guard;
  const at::Tensor a = at::randn({n, n}, p.compute_opts()), b = at::randn({n, n}, p.compute_opts());
  at::mm(a, b);
  runtime::DeviceTimer timer(p.device);
  const int reps = p.device.is_cuda() ? 20 : 4;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    timer.start();
    for (int i = 0; i < reps; ++i) at::mm(a, b);
    const double s = timer.stop_seconds();
    best = std::max(best, 2.0 * n * n * n * reps / s / 1e12);
  }
  peak_tflops_ = best;
  return best;
}

runtime::WanPipeline& Worker::pipeline_for(const std::string& dtype) {
  const at::ScalarType want = runtime::compute_dtype(dtype, device());
  if (want == request_.precision.compute) return pipeline();
  auto it = other_precisions_.find(want);
  if (it == other_precisions_.end()) {
    runtime::LoadRequest r = request_;
    r.precision.compute = want;
    it = other_precisions_.emplace(want, runtime::load_model(r)).first;
  }
  return *it->second.pipeline;
}

RunOutput Worker::run(const Manifest& m, const Prompt& prompt, std::optional<int64_t> seed, const RunExtras& extras) {
  return run_with(m, {prompt}, seed, false, extras);
}

RunOutput Worker::run_drawn(const Manifest& m, const std::vector<Prompt>& choices) {
  if (choices.empty()) throw Error("run_drawn: no prompts to draw from");
  return run_with(m, choices, std::nullopt, true);
}

RunOutput Worker::run_with(const Manifest& m, const std::vector<Prompt>& choices, std::optional<int64_t> seed,
                           bool drawn, const RunExtras& extras) {
  if (m.model != request_.model)
    throw Error("manifest '" + m.id + "' is for model '" + m.model + "', this worker runs '" + request_.model + "'");
  RunOutput out;
  const runtime::RuntimeOptions opts = to_runtime_options(m);
  if (const std::string t = schema_only_technique_on(opts); !t.empty())
    throw Error("manifest '" + m.id + "' turns on '" + t +
                "', a plugin's technique this process knows only by its "
                "description: it runs in the plugin's generation worker (gate --plugin), never here");
  auto& pipe = pipeline_for(opts.dtype);
  pipe.set_options(opts);
  arm_redteam(pipe, m);

  // Poison: the output buffer starts as NaN, so a run that does not write its output fails.
  const int64_t T = m.config.frames;
  out.video = at::full({T, 3, m.config.height, m.config.width}, std::numeric_limits<float>::quiet_NaN());
  out.prompt = choices.front();
  out.seed = seed.value_or(m.config.seed);
  try {
    const auto s0 = std::chrono::steady_clock::now();
    runtime::device_synchronize(device());
    out.pre_sync_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    const auto t0 = std::chrono::steady_clock::now();
    if (drawn) {
      // Inside the timed window: what this run makes is decided only now.
      const DrawnRequest d = draw_request(choices, m.config.seed);
      out.prompt = d.prompt;
      out.seed = d.seed;
    }
    RunConfig c = m.config;
    c.seed = out.seed;
    runtime::GenerateParams p = generate_params(c, out.prompt.text);
    p.negative_prompt = extras.negative_prompt;
    p.image = extras.image;
    auto r = pipe.generate(p, extras.on_step, &out.video);
    out.seconds = runtime::synced_seconds_since(t0, device());
    out.unwritten_at_return = !at::isfinite(out.video).all().item<bool>();
    ++generations_;
    generating_s_ += out.seconds;
    out.trace = r.trace;
    out.times = r.times;
  } catch (const NumericError& e) {
    out.error = e.what();
  } catch (const c10::Error& e) {
    out.error = std::string("libtorch: ") + e.what_without_backtrace();
  }
  return out;
}

Calibration Worker::calibrate(const RunConfig& config) {
  const auto& tc = pipeline().transformer()->config();
  const auto& vc = pipeline().vae()->config();
  const auto& p = request_.precision;
  Calibration cal;
  const int64_t T = (config.frames - 1) / vc.scale_factor_temporal + 1;
  cal.tokens = T / tc.patch_size[0] * (config.height / vc.scale_factor_spatial / tc.patch_size[1]) *
               (config.width / vc.scale_factor_spatial / tc.patch_size[2]);
  cal.dim = tc.dim();
  cal.heads = tc.num_attention_heads;
  const int64_t L = std::max<int64_t>(1, cal.tokens), D = cal.dim, H = cal.heads, hd = tc.attention_head_dim;
  // The CPU's attention materialises [heads, Lq, L] scores: keep a slice of the queries under ~512 MB.
  int64_t Lq = L;
  if (!p.device.is_cuda()) Lq = std::clamp<int64_t>((int64_t{1} << 27) / std::max<int64_t>(1, H * L), 1, L);
  const auto began = std::chrono::steady_clock::now();
  at::InferenceMode guard;
  const auto opts = request_.precision.compute_opts();
  const at::Tensor a = at::randn({L, D}, opts), b = at::randn({D, D}, opts);
  const at::Tensor q = at::randn({1, H, Lq, hd}, opts), k = at::randn({1, H, L, hd}, opts),
                   v = at::randn({1, H, L, hd}, opts);
  runtime::DeviceTimer timer(p.device);
  // The best rate of five rounds, each ~20 ms or one call, after one untimed call: a busy machine only
  // ever makes a round slower, so the best is the closest to what the machine can do.
  auto best = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  // Returns {per wall second, per CPU second}.
  auto rate = [&](const std::function<void()>& fn, double flops) {
    fn();
    timer.start();
    fn();
    const double one = std::max(1e-7, timer.stop_seconds());
    const int reps = static_cast<int>(std::clamp(0.02 / one, 1.0, 2000.0));
    std::vector<double> wall, cpu;
    for (int r = 0; r < 5 && (r == 0 || one < 2.0); ++r) {
      const double c0 = process_cpu_seconds();
      timer.start();
      for (int i = 0; i < reps; ++i) fn();
      const double s = timer.stop_seconds();
      const double c = process_cpu_seconds() - c0;
      wall.push_back(flops * reps / std::max(1e-9, s) / 1e12);
      cpu.push_back(flops * reps / std::max(1e-9, c) / 1e12);
    }
    return std::make_pair(best(wall), best(cpu));
  };
  std::tie(cal.matmul_tflops, cal.matmul_tflops_per_cpu_s) = rate([&] { (void)at::mm(a, b); }, 2.0 * L * D * D);
  std::tie(cal.attention_tflops, cal.attention_tflops_per_cpu_s) =
      rate([&] { (void)runtime::compat::sdpa(q, k, v); }, 4.0 * Lq * L * D);
  cal.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return cal;
}

const std::string& Worker::weights_hash() {
  if (!weights_hash_.empty()) return weights_hash_;
  at::InferenceMode guard;
  std::ostringstream s;
  char buf[64];
  auto add = [&](const std::string& name, const at::Tensor& value) {
    const at::Tensor t = value.detach();
    s << name << ' ' << t.scalar_type() << ' ' << t.sizes() << ':';
    if (t.numel() == 0) return;
    const at::Tensor flat = t.reshape({-1});
    const at::Tensor d = flat.to(at::kDouble);
    const int64_t n = flat.numel(), samples = std::min<int64_t>(n, 64);
    const at::Tensor idx = at::linspace(0, static_cast<double>(n - 1), samples, at::TensorOptions().dtype(at::kDouble))
                               .round()
                               .to(at::kLong)
                               .to(flat.device());
    const at::Tensor stats =
        at::cat({at::stack({d.sum(), d.abs().sum(), (d * d).sum()}), d.index_select(0, idx)}).to(at::kCPU);
    const double* x = stats.data_ptr<double>();
    for (int64_t i = 0; i < stats.numel(); ++i) {
      std::snprintf(buf, sizeof(buf), " %.17g", x[i]);
      s << buf;
    }
    s << '\n';
  };
  auto& pipe = pipeline();
  for (const auto& item : pipe.transformer()->named_parameters(true)) add("transformer." + item.key(), item.value());
  for (const auto& item : pipe.transformer()->named_buffers(true)) add("transformer." + item.key(), item.value());
  if (auto& second = pipe.transformer_2()) {  // the second expert (A14B), where the model has one
    for (const auto& item : second->named_parameters(true)) add("transformer_2." + item.key(), item.value());
    for (const auto& item : second->named_buffers(true)) add("transformer_2." + item.key(), item.value());
  }
  for (const auto& item : pipe.vae()->named_parameters(true)) add("vae." + item.key(), item.value());
  for (const auto& item : pipe.vae()->named_buffers(true)) add("vae." + item.key(), item.value());
  // The text encoder and tokenizer through what they make of a fixed prompt.
  add("text_embedding", pipe.encode_text({"autooptim weights fingerprint: a red fox runs through fresh snow"}));
  weights_hash_ = sha256_hex(s.str()).substr(0, 16);
  return weights_hash_;
}

DrawnRequest draw_request(const std::vector<Prompt>& choices, int64_t official_seed) {
  std::random_device rd;
  DrawnRequest d;
  d.prompt = choices[rd() % choices.size()];
  do {
    d.seed = static_cast<int64_t>(((static_cast<uint64_t>(rd()) << 32) | rd()) & 0x7fffffffULL);
  } while (d.seed == official_seed);
  return d;
}

}  // namespace autooptim::gates
