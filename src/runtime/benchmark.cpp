#include "runtime/benchmark.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <tuple>

#include "base/error.h"
#include "runtime/device.h"
#include "runtime/extension_points.h"
#include "runtime/flops.h"
#include "runtime/forward_context.h"
#include "runtime/profile.h"
#include "runtime/techniques/kernel/attention_backend.h"
#include "runtime/techniques/registry.h"
#include "runtime/techniques/sparse/video_sparse_attention.h"
#include "runtime/techniques/kernel/timestep_dedup_options.h"
#include "runtime/techniques/kernel/uniform_timestep_options.h"

using nlohmann::json;

namespace autooptim::runtime {

double measured_peak_tflops(const Precision& p) {
  const int64_t n = p.device.is_cuda() ? 8192 : 1024;
  const auto opts = p.compute_opts();
  const at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
  at::mm(a, b);
  DeviceTimer timer(p.device);
  const int reps = p.device.is_cuda() ? 20 : 3;
  timer.start();
  for (int i = 0; i < reps; ++i) at::mm(a, b);
  const double s = timer.stop_seconds();
  return 2.0 * n * n * n * reps / s / 1e12;
}

TimingStats time_region(const at::Device& dev, int64_t warmup, int64_t repeat, const std::function<void()>& f) {
  for (int64_t i = 0; i < warmup; ++i) f();
  std::vector<double> runs;
  DeviceTimer timer(dev);
  for (int64_t i = 0; i < repeat; ++i) {
    timer.start();
    f();
    runs.push_back(timer.stop_seconds());
  }
  return TimingStats::of(runs);
}

namespace {

std::string text_of(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string text_of(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string text(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(text.data(), text.size(), fmt, again);
  va_end(again);
  text.pop_back();
  return text;
}

// What every stage reads: the settings, the loaded pipeline, the latent shape and the results so far.
struct Bench {
  const LoadRequest& req;
  const BenchSettings& set;
  const BenchReporter& reporter;
  WanPipeline& pipe;
  const at::Device dev;
  const bool cuda;
  double peak = 0;              // TFLOP/s
  int64_t T = 0, h = 0, w = 0;  // latent frames, height, width
  int64_t L = 0, S = 0;         // video tokens, text tokens
  json out = json::object();
  at::Tensor lat;  // the latents the decode is timed on: the denoising steps' output, or random ones

  void say(const std::string& text) const {
    if (reporter.line) reporter.line(text);
  }
  ForwardContext forward_context(Trace* trace) const {
    ForwardContext fc;
    fc.options = &pipe.options();
    fc.trace = trace;
    fc.step = set.at_step;
    fc.steps = std::max<int64_t>(set.at_step + 1, 50);
    return fc;
  }
};

// The categories' table of one profiled region.
void say_categories(const Bench& b, const Profiler& p, const char* what, double total, double n) {
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [k, ms] : p.totals_ms()) order.push_back({ms, k});
  std::sort(order.rbegin(), order.rend());
  b.say(text_of("profile of the %s (mean of %d), by category:\n", what, p.regions()));
  for (const auto& [ms, k] : order)
    b.say(text_of("  %-22s %10.2f ms %6.1f%%\n", k.c_str(), ms / n, total > 0 ? 100 * ms / total : 0.0));
  b.say(text_of("  %-22s %10.2f ms\n", "total", total / n));
}

// Per operation shape: calls and milliseconds per region, and the rate where FLOPs are known.
json operations(const Bench& b, const Profiler& p, double total, double n) {
  std::vector<std::pair<double, std::string>> order;
  json det = json::object();
  for (const auto& [k, d] : p.detail_totals()) {
    order.push_back({d.ms, k});
    det[k] = {{"ms", d.ms / n}, {"calls", static_cast<double>(d.calls) / n}, {"share", total > 0 ? d.ms / total : 0.0}};
    if (d.flops > 0 && d.ms > 0) det[k]["tflops"] = d.flops / (d.ms * 1e-3) / 1e12;
    if (d.bytes > 0 && d.ms > 0) det[k]["gbps"] = d.bytes / (d.ms * 1e-3) / 1e9;
  }
  std::sort(order.rbegin(), order.rend());
  b.say("  by operation (calls, ms, share, TFLOP/s or GB/s moved at least):\n");
  for (const auto& [ms, k] : order) {
    const auto& d = p.detail_totals().at(k);
    std::string line = text_of("    %-64s %6.1f %9.2f ms %5.1f%%", k.c_str(), static_cast<double>(d.calls) / n, ms / n,
                               total > 0 ? 100 * ms / total : 0.0);
    if (d.flops > 0 && ms > 0) line += text_of(" %7.1f TFLOP/s", d.flops / (ms * 1e-3) / 1e12);
    if (d.bytes > 0 && ms > 0) line += text_of(" %7.0f GB/s", d.bytes / (ms * 1e-3) / 1e9);
    b.say(line + "\n");
  }
  return det;
}

// The profiler's totals per region: milliseconds and share of the region by category (and by operation
// in detail mode), said as a table.
json profile_report(const Bench& b, const Profiler& p, const char* what) {
  double total = 0;
  for (const auto& [k, ms] : p.totals_ms()) total += ms;
  const double n = std::max(1, p.regions());
  json cats = json::object();
  for (const auto& [k, ms] : p.totals_ms()) cats[k] = {{"ms", ms / n}, {"share", total > 0 ? ms / total : 0.0}};
  say_categories(b, p, what, total, n);
  json res = {{"categories", cats}, {"total_ms", total / n}, {"regions", p.regions()}};
  if (p.detailed()) res["operations"] = operations(b, p, total, n);
  return res;
}

// `f` once under the profiler (in detail mode with --profile-detail), reported under out.profile[key].
void profile_once(Bench& b, const std::string& key, const std::function<void()>& f) {
  Profiler prof(b.dev);
  prof.set_detailed(b.set.profile_detail);
  prof.start();
  f();
  prof.stop();
  b.out["profile"][key] = profile_report(b, prof, key.c_str());
}

// Text encoding: the prompt and the negative prompt.
void bench_text_encoding(Bench& b) {
  auto text = time_region(b.dev, 1, b.set.repeat, [&] {
    b.pipe.encode_text({"a red fox running through fresh snow", ""});
  });
  b.out["text_encoding"] = text.to_json();
  b.say(text_of("text encoding: %.3f s median\n", text.median));
}

// The inputs of a forward at the bench's shape, per-token timesteps as in TI2V; `gen` goes on to draw
// the denoising's latents.
struct ForwardInputs {
  at::Tensor ctx, x, t;
  at::Generator gen = at::detail::createCPUGenerator(0);
};

ForwardInputs forward_inputs(Bench& b) {
  ForwardInputs in;
  in.ctx = b.pipe.encode_text({"a red fox running through fresh snow"});
  const auto& vc = b.pipe.vae()->config();
  in.x = at::randn({1, vc.z_dim, b.T, b.h, b.w}, in.gen, at::kFloat).to(b.dev, b.req.precision.compute);
  in.t = at::full({1, b.L}, 999.0f, at::TensorOptions().device(b.dev));
  return in;
}

// One transformer forward. The manifest's techniques apply here too. A fresh per-generation context each
// forward, so the cross-attention cache cannot carry over between timed forwards; except with a replayed
// forward (cuda_graph), whose point is the steady state of steps 3..50 (the two warm-up forwards capture the
// graph, and the timed ones replay it, reading the cross-attention K/V cached by the first when that is on too).
void bench_forward(Bench& b, const ForwardInputs& in) {
  const auto& o = b.req.options;
  reset_peak_memory(b.dev);
  Trace fwd_trace;
  CrossKVCache replay_kv;  // a replayed forward reads the K/V its first run cached: it outlives the loop
  const std::unique_ptr<ForwardReplay> replay = ext::make_forward_replay(o);
  auto fwd = time_region(b.dev, 2, b.set.repeat, [&] {
    CrossKVCache kv;
    ForwardContext fc = b.forward_context(&fwd_trace);
    fc.cross_kv = replay ? &replay_kv : &kv;
    fc.replay = replay.get();
    b.pipe.transformer()->forward(in.x, in.t, in.ctx, nullptr, &fc);
  });
  const auto& tc = b.pipe.transformer()->config();
  const auto flops = transformer_flops(tc, 1, b.T, b.h, b.w, b.S,
                                       !(o.of<TimestepDedupOptions>().on || o.of<UniformTimestepOptions>().on));
  json fj = fwd.to_json();
  fj["tflop"] = flops.total() / 1e12;
  fj["achieved_tflops"] = flops.total() / fwd.median / 1e12;
  fj["efficiency"] = flops.total() / fwd.median / 1e12 / b.peak;
  fj["floor_s"] = flops.total() / (b.peak * 1e12);
  fj["peak_memory_gb"] = peak_memory_bytes(b.dev) / 1e9;
  fj["trace"] = fwd_trace.to_json();
  fj["at_step"] = b.set.at_step;
  b.out["transformer_forward"] = fj;
  b.say(text_of("transformer forward: %.3f s median (%.1f TFLOP/s, %.0f%% of peak)\n", fwd.median,
                fj["achieved_tflops"].get<double>(), 100 * fj["efficiency"].get<double>()));
}

// Self-attention alone at this shape: the sparse pattern against dense attention on the same q, k, v
// (same backend, same process), with the density the pattern achieved.
void bench_sparse_attention(Bench& b) {
  const auto& o = b.req.options;
  const auto& tc = b.pipe.transformer()->config();
  const int64_t Hn = tc.num_attention_heads, hd = tc.attention_head_dim;
  const auto qo = at::TensorOptions().device(b.dev).dtype(b.req.precision.compute);
  // [B, L, H, d] storage seen as [B, H, L, d], as the model's projections leave them.
  const at::Tensor q = at::randn({1, b.L, Hn, hd}, qo).transpose(1, 2),
                   k = at::randn({1, b.L, Hn, hd}, qo).transpose(1, 2),
                   v = at::randn({1, b.L, Hn, hd}, qo).transpose(1, 2);
  Trace atrace;
  ForwardContext afc;
  afc.options = &b.pipe.options();
  afc.trace = &atrace;
  afc.grid_f = b.T;
  afc.grid_h = b.h / tc.patch_size[1];
  afc.grid_w = b.w / tc.patch_size[2];
  afc.step = o.of<SparseAttentionOptions>().dense_steps;
  afc.layer = o.of<SparseAttentionOptions>().dense_layers;
  ForwardContext dfc = afc;
  dfc.trace = nullptr;
  auto dense = time_region(b.dev, 2, b.set.repeat * 3, [&] { techniques::attention(q, k, v, &dfc); });
  auto sparse = time_region(b.dev, 2, b.set.repeat * 3, [&] { techniques::sparse_self_attention(q, k, v, afc); });
  b.out["attention"] = {{"dense", dense.to_json()},
                        {"sparse", sparse.to_json()},
                        {"pattern", o.of<SparseAttentionOptions>().pattern},
                        {"density", atrace.get("sparse.attention.density")},
                        {"speedup", dense.median / sparse.median}};
  b.say(text_of("self-attention: dense %.2f ms, %s %.2f ms at density %.3f: %.2fx\n", 1e3 * dense.median,
                o.of<SparseAttentionOptions>().pattern.c_str(), 1e3 * sparse.median,
                atrace.get("sparse.attention.density"), dense.median / sparse.median));
}

// Self-attention alone on the manifest's backend, with q/k/v in three layouts of the same values:
// [B, H, L, d] contiguous, [B, L, H, d] storage seen as [B, H, L, d] (what separate projections
// leave), and slices of one [B, L, 3, H, d] tensor (what the fused QKV projection leaves).
void bench_attention_layouts(Bench& b) {
  const auto& tc = b.pipe.transformer()->config();
  const int64_t Hn = tc.num_attention_heads, hd = tc.attention_head_dim, L = b.L;
  const auto qo = at::TensorOptions().device(b.dev).dtype(b.req.precision.compute);
  const at::Tensor qkv = at::randn({1, L, 3, Hn, hd}, qo);
  const at::Tensor fq = qkv.select(2, 0).transpose(1, 2), fk = qkv.select(2, 1).transpose(1, 2),
                   fv = qkv.select(2, 2).transpose(1, 2);
  const at::Tensor sq = fq.transpose(1, 2).contiguous().transpose(1, 2),
                   sk = fk.transpose(1, 2).contiguous().transpose(1, 2),
                   sv = fv.transpose(1, 2).contiguous().transpose(1, 2);
  const at::Tensor cq = fq.contiguous(), ck = fk.contiguous(), cv = fv.contiguous();
  ForwardContext afc;
  afc.options = &b.pipe.options();
  const double aflops = 4.0 * Hn * static_cast<double>(L) * L * hd;
  json aj = json::object();
  std::string line =
      text_of("self-attention alone (%s backend):", b.req.options.of<AttentionBackendOptions>().backend.c_str());
  for (const auto& [label, q, k, v] :
       {std::tuple{"bhld_contiguous", cq, ck, cv}, std::tuple{"blhd_strided", sq, sk, sv},
        std::tuple{"fused_qkv_slices", fq, fk, fv}}) {
    auto st = time_region(b.dev, 2, b.set.repeat * 3, [&] { techniques::attention(q, k, v, &afc); });
    aj[label] = st.to_json();
    aj[label]["tflops"] = aflops / st.median / 1e12;
    line += text_of(" %s %.2f ms (%.0f TFLOP/s);", label, 1e3 * st.median, aflops / st.median / 1e12);
  }
  b.say(line + "\n");
  b.out["attention_layouts"] = aj;
}

// Eager forwards (a CUDA graph cannot hold the profiler's events), each with a fresh context.
void profile_forward(Bench& b, const ForwardInputs& in) {
  Profiler prof(b.dev);
  prof.set_detailed(b.set.profile_detail);
  Trace ptrace;
  for (int64_t i = 0; i < b.set.repeat; ++i) {
    CrossKVCache kv;
    ForwardContext fc = b.forward_context(&ptrace);
    fc.cross_kv = &kv;
    prof.start();
    b.pipe.transformer()->forward(in.x, in.t, in.ctx, nullptr, &fc);
    prof.stop();
  }
  b.out["profile"]["transformer_forward"] = profile_report(b, prof, "transformer forward");
}

// Denoising steps (two forwards with CFG plus the scheduler) through the pipeline's loop; their output
// is what the decode is timed on.
void bench_denoising(Bench& b, ForwardInputs& in) {
  const auto& vc = b.pipe.vae()->config();
  DenoiseInputs d;
  d.latents = at::randn({1, vc.z_dim, b.T, b.h, b.w}, in.gen, at::kFloat);
  d.prompt_embeds = in.ctx;
  d.negative_embeds = b.pipe.encode_text({""});
  d.steps = b.set.steps;
  d.guidance = 5.0;
  StageTimes times;
  Trace trace;
  b.lat = b.pipe.denoise(d, nullptr, {}, &trace, &times);
  std::vector<double> steps(times.step_seconds.begin() + (times.step_seconds.size() > 1 ? 1 : 0),
                            times.step_seconds.end());
  auto st = TimingStats::of(steps);
  json sj = st.to_json();
  sj["steps_run"] = b.set.steps;
  double steps_total = 0;
  for (double x : times.step_seconds) steps_total += x;
  sj["total_s"] = steps_total;  // every step, the first included: a skip schedule's denoising time
  sj["first_step_s"] = times.step_seconds.empty() ? 0.0 : times.step_seconds.front();
  sj["trace"] = trace.to_json();
  // A cache policy's forward-skip ratio (a forced skip schedule measures a cache's speed at a given one).
  sj["forward_skip_ratio"] = trace.has("cache.skip_ratio") ? json(trace.get("cache.skip_ratio")) : json(nullptr);
  b.out["denoising_step"] = sj;
  b.say(text_of("denoising step: %.3f s median\n", st.median));
}

void bench_transformer(Bench& b) {
  bench_text_encoding(b);
  ForwardInputs in = forward_inputs(b);
  bench_forward(b, in);
  if (b.req.options.of<SparseAttentionOptions>().pattern != "none") bench_sparse_attention(b);
  if (b.set.profile_detail) bench_attention_layouts(b);
  if (b.set.profile) profile_forward(b, in);
  bench_denoising(b, in);
}

// A decode's time and its own peak: above what was allocated before it (the models).
json decode_timing(Bench& b, const std::function<void()>& decode, TimingStats& st) {
  const int64_t before = current_memory_bytes(b.dev);
  reset_peak_memory(b.dev);
  st = time_region(b.dev, b.cuda ? 1 : 0, b.cuda ? b.set.repeat : 1, decode);
  json vj = st.to_json();
  vj["peak_memory_gb"] = (peak_memory_bytes(b.dev) - before) / 1e9;
  vj["peak_memory_total_gb"] = peak_memory_bytes(b.dev) / 1e9;
  return vj;
}

// The pipeline's VAE runs in float32 as the reference's does; a bf16 copy of the same weights is timed too.
void bench_vae(Bench& b, AutoencoderKLWan& vae, const char* name) {
  const at::Tensor z = vae->denormalize(b.lat.to(b.dev, at::kFloat));
  TimingStats st;
  json vj = decode_timing(
      b, [&] { vae->decode(z); }, st);
  b.out[name] = vj;
  if (b.set.profile) profile_once(b, name, [&] { vae->decode(z); });
  b.say(text_of("%s: %.3f s median, decode's own peak %.1f GB\n", name, st.median, vj["peak_memory_gb"].get<double>()));
}

AutoencoderKLWan bf16_copy(Bench& b) {
  AutoencoderKLWan vae16(b.pipe.vae()->config(), Precision{at::kBFloat16, b.dev});
  at::NoGradGuard g;
  auto src = b.pipe.vae()->named_parameters();
  for (auto& p : vae16->named_parameters()) p.value().copy_(src[p.key()]);
  return vae16;
}

// VAE switches through the pipeline's decode against the float32 decode of the same latents (`ref`, one
// reference, one process): time, own peak memory, and the clip's error (PSNR at 8-bit peak, relative L2).
void bench_vae_switches(Bench& b, const std::string& label, const RuntimeOptions& o, at::Tensor& ref) {
  if (!ref.defined())
    ref = (b.pipe.vae()->decode(b.pipe.vae()->denormalize(b.lat.to(b.dev, at::kFloat))).to(at::kFloat) / 2 + 0.5)
              .clamp(0, 1);
  b.pipe.set_options(o);
  Trace vtrace;
  at::Tensor got;
  b.pipe.decoding_vae();  // the converted copy is made once, outside the timing (as a worker keeps it)
  TimingStats st;
  json vj = decode_timing(
      b, [&] { got = b.pipe.decode(b.lat, &vtrace); }, st);
  vj["host_enqueue_s"] = b.pipe.last_decode_enqueue_s();  // of the last timed decode
  const double mse = (got - ref).pow(2).mean().item<double>();
  vj["psnr_vs_fp32_db"] = mse > 0 ? 10.0 * std::log10(1.0 / mse) : 100.0;
  vj["rel_l2_vs_fp32"] = ((got - ref).norm() / ref.norm().clamp_min(1e-12)).item<double>();
  vj["flags"] = techniques::flags_to_json(o);
  vj["trace"] = vtrace.to_json();
  got = at::Tensor();
  b.out["vae_decode_switches"][label] = vj;
  if (b.set.profile) profile_once(b, "vae_decode_" + label, [&] { b.pipe.decode(b.lat); });
  b.say(
      text_of("vae_decode_%s: %.3f s median (the host enqueued it in %.3f s), decode's own peak %.1f GB, %.2f dB "
              "PSNR vs fp32 (rel L2 %.2e)\n",
              label.c_str(), st.median, vj["host_enqueue_s"].get<double>(), vj["peak_memory_gb"].get<double>(),
              vj["psnr_vs_fp32_db"].get<double>(), vj["rel_l2_vs_fp32"].get<double>()));
}

void bench_decode(Bench& b) {
  bench_vae(b, b.pipe.vae(), "vae_decode_fp32");
  if (b.cuda) {
    AutoencoderKLWan vae16 = bf16_copy(b);
    bench_vae(b, vae16, "vae_decode_bf16");
  }
  // The VAE switches of the manifest, and of each further set.
  at::Tensor ref;
  const RuntimeOptions own = b.pipe.options();
  if (techniques::works_on_decode(own)) bench_vae_switches(b, "manifest", own, ref);
  for (const auto& [label, o] : b.set.vae_switches) bench_vae_switches(b, label, o, ref);
  b.pipe.set_options(own);
}

void bench_generation(Bench& b) {
  GenerateParams p;
  p.height = b.set.height;
  p.width = b.set.width;
  p.frames = b.set.frames;
  p.steps = b.set.generation_steps;
  p.prompt = "a red fox running through fresh snow";
  reset_peak_memory(b.dev);
  const auto r = b.pipe.generate(p, [&b](int64_t i, int64_t n, double s) {
    if (b.reporter.generation_step) b.reporter.generation_step(i, n, s);
  });
  if (b.reporter.generation_done) b.reporter.generation_done();
  b.out["generation"] = {
      {"steps", p.steps},
      {"text_encoding_s", r.times.text_encoding},
      {"denoising_s", r.times.denoising},
      {"decoding_s", r.times.decoding},
      {"total_s", r.times.total()},
      {"step_s", TimingStats::of(r.times.step_seconds).to_json()},
      {"peak_memory_gb", peak_memory_bytes(b.dev) / 1e9},
      {"forward_skip_ratio", r.trace.has("cache.skip_ratio") ? json(r.trace.get("cache.skip_ratio")) : json(nullptr)}};
  b.say(text_of("full generation: %.1f s (denoise %.1f, decode %.1f)\n", r.times.total(), r.times.denoising,
                r.times.decoding));
}

// The run's facts: model, weights, device, dtype, shape, the matmul peak and the load.
void describe(Bench& b, const LoadedModel& loaded, int64_t load_peak) {
  const auto& vc = b.pipe.vae()->config();
  b.out["model"] = b.req.model;
  b.out["weights"] = loaded.weights_label;
  b.out["device"] = b.cuda ? "cuda" : "cpu";
  b.out["device_name"] = device_name(b.dev);
  b.out["clocks"] = gpu_clocks(b.dev);
  b.out["cpu_threads"] = at::get_num_threads();
  b.out["dtype"] = b.req.precision.compute == at::kBFloat16 ? "bf16" : "fp32";
  b.out["shape"] = {{"height", b.set.height}, {"width", b.set.width},
                    {"frames", b.set.frames}, {"latent", {vc.z_dim, b.T, b.h, b.w}},
                    {"tokens", b.L},          {"text_tokens", b.S}};
  b.out["measured_peak_tflops"] = b.peak;
  b.out["load_seconds"] = loaded.load_seconds;
  b.out["load_peak_memory_gb"] = load_peak / 1e9;
}

}  // namespace

void check_bench_settings(const BenchSettings& set, int64_t pixel_multiple) {
  GenerateParams shape;
  shape.height = set.height;
  shape.width = set.width;
  shape.frames = set.frames;
  shape.steps = set.steps;
  validate_params(shape, pixel_multiple);
  if (set.repeat < 1) throw Error("--repeat must be at least 1");
}

json run_benchmark(const LoadRequest& req, const BenchSettings& set, const BenchReporter& reporter) {
  check_bench_settings(set, models::model_facts(req.model).pixel_multiple);  // before a large model loads
  const auto dev = req.precision.device;
  const double peak = measured_peak_tflops(req.precision);
  if (reporter.line) reporter.line(text_of("measured matmul peak: %.1f TFLOP/s\n", peak));
  reset_peak_memory(dev);
  auto loaded = load_model(req);
  if (reporter.line) reporter.line(text_of("model loaded in %.2f s\n", loaded.load_seconds));
  const int64_t load_peak = peak_memory_bytes(dev);

  Bench b{req, set, reporter, *loaded.pipeline, dev, dev.is_cuda()};
  b.peak = peak;
  const auto& tc = b.pipe.transformer()->config();
  const auto& vc = b.pipe.vae()->config();
  b.T = (set.frames - 1) / vc.scale_factor_temporal + 1;
  b.h = set.height / vc.scale_factor_spatial;
  b.w = set.width / vc.scale_factor_spatial;
  b.L = b.T * (b.h / tc.patch_size[1]) * (b.w / tc.patch_size[2]);
  b.S = b.pipe.max_text_length;
  at::InferenceMode guard;
  describe(b, loaded, load_peak);
  if (set.vae_only) {
    auto g = at::detail::createCPUGenerator(0);
    b.lat = at::randn({1, vc.z_dim, b.T, b.h, b.w}, g, at::kFloat).to(dev);
  } else {
    bench_transformer(b);
  }
  if (!set.skip_vae) bench_decode(b);
  if (set.full_generation) bench_generation(b);
  return b.out;
}

}  // namespace autooptim::runtime
