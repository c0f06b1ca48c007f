// autooptim bench: times each stage of the pipeline with device events after warm-up, and reports
// medians, spread, peak memory and FLOP-based efficiency against the measured matmul peak.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <tuple>

#include "commands.h"
#include "gates/manifest.h"
#include "model_args.h"
#include "models/model_table.h"
#include "runtime/device.h"
#include "base/error.h"
#include "base/log.h"
#include "runtime/flops.h"
#include "runtime/profile.h"
#include "runtime/forward_context.h"
#include "base/stats.h"
#include "runtime/techniques/kernel/attention_backend.h"
#include "runtime/techniques/kernel/cuda_graph.h"
#include "runtime/techniques/registry.h"
#include "runtime/techniques/sparse/video_sparse_attention.h"

namespace autooptim::app {
namespace {

struct BenchArgs {
  ModelArgs model;
  std::string manifest;
  int64_t steps = 3;
  int64_t frames = 121;
  int64_t height = 704;
  int64_t width = 1280;
  int64_t repeat = 3;
  bool skip_vae = false;
  bool vae_only = false;
  std::vector<std::string> vae_manifests;
  bool full_generation = false;
  bool profile = false;
  bool profile_detail = false;
  int64_t at_step = 0;
  int64_t generation_steps = 50;
  std::string json;
};

// Dense matmul rate on this device in its compute dtype: the ceiling efficiency is measured against.
double measured_peak_tflops(const runtime::Precision& p) {
  const int64_t n = p.device.is_cuda() ? 8192 : 1024;
  const auto opts = p.compute_opts();
  const at::Tensor a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
  at::mm(a, b);
  runtime::DeviceTimer timer(p.device);
  const int reps = p.device.is_cuda() ? 20 : 3;
  timer.start();
  for (int i = 0; i < reps; ++i) at::mm(a, b);
  const double s = timer.stop_seconds();
  return 2.0 * n * n * n * reps / s / 1e12;
}

// The profiler's totals per region: milliseconds and share of the region by category, printed as a table.
nlohmann::json profile_report(const runtime::Profiler& p, const char* what) {
  double total = 0;
  for (const auto& [k, ms] : p.totals_ms()) total += ms;
  const double n = std::max(1, p.regions());
  nlohmann::json cats = nlohmann::json::object();
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [k, ms] : p.totals_ms()) {
    cats[k] = {{"ms", ms / n}, {"share", total > 0 ? ms / total : 0.0}};
    order.push_back({ms, k});
  }
  std::sort(order.rbegin(), order.rend());
  std::fprintf(stderr, "profile of the %s (mean of %d), by category:\n", what, p.regions());
  for (const auto& [ms, k] : order)
    std::fprintf(stderr, "  %-22s %10.2f ms %6.1f%%\n", k.c_str(), ms / n, total > 0 ? 100 * ms / total : 0.0);
  std::fprintf(stderr, "  %-22s %10.2f ms\n", "total", total / n);
  nlohmann::json res = {{"categories", cats}, {"total_ms", total / n}, {"regions", p.regions()}};
  if (p.detailed()) {
    // Per operation shape: calls and milliseconds per region, and the rate where FLOPs are known.
    std::vector<std::pair<double, std::string>> dorder;
    nlohmann::json det = nlohmann::json::object();
    for (const auto& [k, d] : p.detail_totals()) {
      dorder.push_back({d.ms, k});
      det[k] = {{"ms", d.ms / n}, {"calls", static_cast<double>(d.calls) / n}, {"share", total > 0 ? d.ms / total : 0.0}};
      if (d.flops > 0 && d.ms > 0) det[k]["tflops"] = d.flops / (d.ms * 1e-3) / 1e12;
      if (d.bytes > 0 && d.ms > 0) det[k]["gbps"] = d.bytes / (d.ms * 1e-3) / 1e9;
    }
    std::sort(dorder.rbegin(), dorder.rend());
    std::fprintf(stderr, "  by operation (calls, ms, share, TFLOP/s or GB/s moved at least):\n");
    for (const auto& [ms, k] : dorder) {
      const auto& d = p.detail_totals().at(k);
      std::fprintf(stderr, "    %-64s %6.1f %9.2f ms %5.1f%%", k.c_str(), static_cast<double>(d.calls) / n, ms / n,
                   total > 0 ? 100 * ms / total : 0.0);
      if (d.flops > 0 && ms > 0) std::fprintf(stderr, " %7.1f TFLOP/s", d.flops / (ms * 1e-3) / 1e12);
      if (d.bytes > 0 && ms > 0) std::fprintf(stderr, " %7.0f GB/s", d.bytes / (ms * 1e-3) / 1e9);
      std::fprintf(stderr, "\n");
    }
    res["operations"] = det;
  }
  return res;
}

template <typename F>
runtime::TimingStats time_region(const at::Device& dev, int64_t warmup, int64_t repeat, F&& f) {
  for (int64_t i = 0; i < warmup; ++i) f();
  std::vector<double> runs;
  runtime::DeviceTimer timer(dev);
  for (int64_t i = 0; i < repeat; ++i) {
    timer.start();
    f();
    runs.push_back(timer.stop_seconds());
  }
  return runtime::TimingStats::of(runs);
}

void run_bench(const BenchArgs& a) {
  runtime::GenerateParams shape;
  shape.height = a.height;
  shape.width = a.width;
  shape.frames = a.frames;
  shape.steps = a.steps;
  runtime::validate_params(shape);
  if (a.repeat < 1) throw Error("--repeat must be at least 1");
  auto req = a.model.request();
  nlohmann::json out;
  if (!a.manifest.empty()) {
    const auto m = gates::load_manifest(a.manifest);
    if (m.model != a.model.model) throw Error(a.manifest + ": manifest is for model '" + m.model + "', not '" + a.model.model + "'");
    req.options = gates::to_runtime_options(m);
    warn_idle_switches(a.manifest, req.options);
    if (req.precision.device.is_cuda()) req.precision.compute = req.options.dtype == "fp32" ? at::kFloat : at::kBFloat16;
    out["manifest"] = gates::to_json(m);
  }
  const auto dev = req.precision.device;
  const bool cuda = dev.is_cuda();

  const double peak = measured_peak_tflops(req.precision);
  std::fprintf(stderr, "measured matmul peak: %.1f TFLOP/s\n", peak);
  runtime::reset_peak_memory(dev);
  auto loaded = runtime::load_model(req);
  auto& pipe = *loaded.pipeline;
  std::fprintf(stderr, "model loaded in %.2f s\n", loaded.load_seconds);
  const int64_t load_peak = runtime::peak_memory_bytes(dev);

  const auto& tc = pipe.transformer()->config();
  const auto& vc = pipe.vae()->config();
  const int64_t T = (a.frames - 1) / vc.scale_factor_temporal + 1;
  const int64_t h = a.height / vc.scale_factor_spatial, w = a.width / vc.scale_factor_spatial;
  const int64_t L = T * (h / tc.patch_size[1]) * (w / tc.patch_size[2]);
  const int64_t S = pipe.max_text_length;
  at::InferenceMode guard;

  out["model"] = a.model.model;
  out["weights"] = loaded.weights_label;
  out["device"] = cuda ? "cuda" : "cpu";
  out["device_name"] = runtime::device_name(dev);
  out["clocks"] = runtime::gpu_clocks(dev);
  out["cpu_threads"] = at::get_num_threads();
  out["dtype"] = req.precision.compute == at::kBFloat16 ? "bf16" : "fp32";
  out["shape"] = {{"height", a.height}, {"width", a.width}, {"frames", a.frames}, {"latent", {vc.z_dim, T, h, w}},
                  {"tokens", L}, {"text_tokens", S}};
  out["measured_peak_tflops"] = peak;
  out["load_seconds"] = loaded.load_seconds;
  out["load_peak_memory_gb"] = load_peak / 1e9;

  at::Tensor lat;  // the latents the decode is timed on: the denoising steps' output, or random ones
  if (a.vae_only) {
    auto g = at::detail::createCPUGenerator(0);
    lat = at::randn({1, vc.z_dim, T, h, w}, g, at::kFloat).to(dev);
  } else {
  // Text encoding: the prompt and the negative prompt.
  auto text = time_region(dev, 1, a.repeat, [&] { pipe.encode_text({"a red fox running through fresh snow", ""}); });
  out["text_encoding"] = text.to_json();
  std::fprintf(stderr, "text encoding: %.3f s median\n", text.median);

  // One transformer forward at the shape, per-token timesteps as in TI2V.
  const at::Tensor ctx = pipe.encode_text({"a red fox running through fresh snow"});
  auto gen = at::detail::createCPUGenerator(0);
  const at::Tensor x = at::randn({1, vc.z_dim, T, h, w}, gen, at::kFloat).to(dev, req.precision.compute);
  const at::Tensor t = at::full({1, L}, 999.0f, at::TensorOptions().device(dev));
  runtime::reset_peak_memory(dev);
  // The manifest's techniques apply here too. A fresh per-generation context each forward, so the
  // cross-attention cache cannot carry over between timed forwards; except with cuda_graph, whose
  // point is the steady state of steps 3..50 (the two warm-up forwards capture the graph, and the
  // timed ones replay it, reading the cross-attention K/V cached by the first when that is on too).
  runtime::Trace fwd_trace;
  runtime::CrossKVCache graph_kv;
  runtime::techniques::CudaGraphs graphs;
  auto fwd = time_region(dev, 2, a.repeat, [&] {
    runtime::CrossKVCache kv;
    runtime::ForwardContext fc;
    fc.options = &pipe.options();
    fc.trace = &fwd_trace;
    fc.cross_kv = req.options.cuda_graph ? &graph_kv : &kv;
    fc.step = a.at_step;
    fc.steps = std::max<int64_t>(a.at_step + 1, 50);
    if (req.options.cuda_graph) fc.cuda_graphs = &graphs;
    pipe.transformer()->forward(x, t, ctx, nullptr, &fc);
  });
  const auto flops =
      runtime::transformer_flops(tc, 1, T, h, w, S, !(req.options.timestep_dedup || req.options.uniform_timestep));
  nlohmann::json fj = fwd.to_json();
  fj["tflop"] = flops.total() / 1e12;
  fj["achieved_tflops"] = flops.total() / fwd.median / 1e12;
  fj["efficiency"] = flops.total() / fwd.median / 1e12 / peak;
  fj["floor_s"] = flops.total() / (peak * 1e12);
  fj["peak_memory_gb"] = runtime::peak_memory_bytes(dev) / 1e9;
  fj["trace"] = fwd_trace.to_json();
  fj["at_step"] = a.at_step;
  out["transformer_forward"] = fj;
  std::fprintf(stderr, "transformer forward: %.3f s median (%.1f TFLOP/s, %.0f%% of peak)\n", fwd.median,
               fj["achieved_tflops"].get<double>(), 100 * fj["efficiency"].get<double>());
  if (req.options.sparse.pattern != "none") {
    // Self-attention alone at this shape: the sparse pattern against dense attention on the same q, k, v
    // (same backend, same process), with the density the pattern achieved.
    const int64_t Hn = tc.num_attention_heads, hd = tc.attention_head_dim;
    const auto qo = at::TensorOptions().device(dev).dtype(req.precision.compute);
    // [B, L, H, d] storage seen as [B, H, L, d], as the model's projections leave them.
    const at::Tensor q = at::randn({1, L, Hn, hd}, qo).transpose(1, 2), k = at::randn({1, L, Hn, hd}, qo).transpose(1, 2),
                     v = at::randn({1, L, Hn, hd}, qo).transpose(1, 2);
    runtime::Trace atrace;
    runtime::ForwardContext afc;
    afc.options = &pipe.options();
    afc.trace = &atrace;
    afc.grid_f = T;
    afc.grid_h = h / tc.patch_size[1];
    afc.grid_w = w / tc.patch_size[2];
    afc.step = req.options.sparse.dense_steps;
    afc.layer = req.options.sparse.dense_layers;
    runtime::ForwardContext dfc = afc;
    dfc.trace = nullptr;
    auto dense = time_region(dev, 2, a.repeat * 3, [&] { runtime::techniques::attention(q, k, v, &dfc); });
    auto sparse = time_region(dev, 2, a.repeat * 3, [&] { runtime::techniques::sparse_self_attention(q, k, v, afc); });
    out["attention"] = {{"dense", dense.to_json()},
                        {"sparse", sparse.to_json()},
                        {"pattern", req.options.sparse.pattern},
                        {"density", atrace.get("sparse.attention.density")},
                        {"speedup", dense.median / sparse.median}};
    std::fprintf(stderr, "self-attention: dense %.2f ms, %s %.2f ms at density %.3f: %.2fx\n", 1e3 * dense.median,
                 req.options.sparse.pattern.c_str(), 1e3 * sparse.median, atrace.get("sparse.attention.density"),
                 dense.median / sparse.median);
  }
  if (a.profile_detail) {
    // Self-attention alone on the manifest's backend, with q/k/v in three layouts of the same values:
    // [B, H, L, d] contiguous, [B, L, H, d] storage seen as [B, H, L, d] (what separate projections
    // leave), and slices of one [B, L, 3, H, d] tensor (what the fused QKV projection leaves).
    const int64_t Hn = tc.num_attention_heads, hd = tc.attention_head_dim;
    const auto qo = at::TensorOptions().device(dev).dtype(req.precision.compute);
    const at::Tensor qkv = at::randn({1, L, 3, Hn, hd}, qo);
    const at::Tensor fq = qkv.select(2, 0).transpose(1, 2), fk = qkv.select(2, 1).transpose(1, 2), fv = qkv.select(2, 2).transpose(1, 2);
    const at::Tensor sq = fq.transpose(1, 2).contiguous().transpose(1, 2), sk = fk.transpose(1, 2).contiguous().transpose(1, 2),
                     sv = fv.transpose(1, 2).contiguous().transpose(1, 2);
    const at::Tensor cq = fq.contiguous(), ck = fk.contiguous(), cv = fv.contiguous();
    runtime::ForwardContext afc;
    afc.options = &pipe.options();
    const double aflops = 4.0 * Hn * static_cast<double>(L) * L * hd;
    nlohmann::json aj = nlohmann::json::object();
    std::fprintf(stderr, "self-attention alone (%s backend):", req.options.attention_backend.c_str());
    for (const auto& [label, q, k, v] : {std::tuple{"bhld_contiguous", cq, ck, cv}, std::tuple{"blhd_strided", sq, sk, sv},
                                         std::tuple{"fused_qkv_slices", fq, fk, fv}}) {
      auto st = time_region(dev, 2, a.repeat * 3, [&] { runtime::techniques::attention(q, k, v, &afc); });
      aj[label] = st.to_json();
      aj[label]["tflops"] = aflops / st.median / 1e12;
      std::fprintf(stderr, " %s %.2f ms (%.0f TFLOP/s);", label, 1e3 * st.median, aflops / st.median / 1e12);
    }
    std::fprintf(stderr, "\n");
    out["attention_layouts"] = aj;
  }
  if (a.profile) {
    // Eager forwards (a CUDA graph cannot hold the profiler's events), each with a fresh context.
    runtime::Profiler prof(dev);
    prof.set_detailed(a.profile_detail);
    runtime::Trace ptrace;
    for (int64_t i = 0; i < a.repeat; ++i) {
      runtime::CrossKVCache kv;
      runtime::ForwardContext fc;
      fc.options = &pipe.options();
      fc.trace = &ptrace;
      fc.cross_kv = &kv;
      fc.step = a.at_step;
      fc.steps = std::max<int64_t>(a.at_step + 1, 50);
      prof.start();
      pipe.transformer()->forward(x, t, ctx, nullptr, &fc);
      prof.stop();
    }
    out["profile"]["transformer_forward"] = profile_report(prof, "transformer forward");
  }

  // Denoising steps (two forwards with CFG plus the scheduler) through the pipeline's loop.
  runtime::DenoiseInputs in;
  in.latents = at::randn({1, vc.z_dim, T, h, w}, gen, at::kFloat);
  in.prompt_embeds = ctx;
  in.negative_embeds = pipe.encode_text({""});
  in.steps = a.steps;
  in.guidance = 5.0;
  runtime::StageTimes times;
  runtime::Trace trace;
  lat = pipe.denoise(in, nullptr, {}, &trace, &times);
  std::vector<double> steps(times.step_seconds.begin() + (times.step_seconds.size() > 1 ? 1 : 0), times.step_seconds.end());
  auto st = runtime::TimingStats::of(steps);
  nlohmann::json sj = st.to_json();
  sj["steps_run"] = a.steps;
  double steps_total = 0;
  for (double x : times.step_seconds) steps_total += x;
  sj["total_s"] = steps_total;  // every step, the first included: a skip schedule's denoising time
  sj["first_step_s"] = times.step_seconds.empty() ? 0.0 : times.step_seconds.front();
  sj["trace"] = trace.to_json();
  // A cache policy's forward-skip ratio (a forced skip schedule measures a cache's speed at a given one).
  sj["forward_skip_ratio"] = trace.has("cache.skip_ratio") ? nlohmann::json(trace.get("cache.skip_ratio")) : nlohmann::json(nullptr);
  out["denoising_step"] = sj;
  std::fprintf(stderr, "denoising step: %.3f s median\n", st.median);

  }  // !vae_only

  if (!a.skip_vae) {
    // The pipeline's VAE runs in float32 as the reference's does; a bf16 copy of the same weights is
    // timed too. Memory: the decode's own peak above what was allocated before it (the models).
    auto time_vae = [&](runtime::AutoencoderKLWan& vae, const char* name) {
      const at::Tensor z = vae->denormalize(lat.to(dev, at::kFloat));
      const int64_t before = runtime::current_memory_bytes(dev);
      runtime::reset_peak_memory(dev);
      auto st = time_region(dev, cuda ? 1 : 0, cuda ? a.repeat : 1, [&] { vae->decode(z); });
      nlohmann::json vj = st.to_json();
      vj["peak_memory_gb"] = (runtime::peak_memory_bytes(dev) - before) / 1e9;
      vj["peak_memory_total_gb"] = runtime::peak_memory_bytes(dev) / 1e9;
      out[name] = vj;
      if (a.profile) {
        runtime::Profiler prof(dev);
        prof.set_detailed(a.profile_detail);
        prof.start();
        vae->decode(z);
        prof.stop();
        out["profile"][name] = profile_report(prof, name);
      }
      std::fprintf(stderr, "%s: %.3f s median, decode's own peak %.1f GB\n", name, st.median, vj["peak_memory_gb"].get<double>());
    };
    time_vae(pipe.vae(), "vae_decode_fp32");
    if (cuda) {
      runtime::AutoencoderKLWan vae16(vc, runtime::Precision{at::kBFloat16, dev});
      {
        at::NoGradGuard g;
        auto src = pipe.vae()->named_parameters();
        for (auto& p : vae16->named_parameters()) p.value().copy_(src[p.key()]);
      }
      time_vae(vae16, "vae_decode_bf16");
    }
    // The VAE switches of the manifest, and of each --vae-manifest, through the pipeline's decode, against
    // the float32 decode of the same latents (one reference, one process): time, own peak memory, and the
    // clip's error (PSNR at 8-bit peak, relative L2).
    at::Tensor ref;
    auto time_switches = [&](const std::string& label, const runtime::RuntimeOptions& o) {
      if (!ref.defined())
        ref = (pipe.vae()->decode(pipe.vae()->denormalize(lat.to(dev, at::kFloat))).to(at::kFloat) / 2 + 0.5).clamp(0, 1);
      pipe.set_options(o);
      runtime::Trace vtrace;
      at::Tensor got;
      pipe.decoding_vae();  // the converted copy is made once, outside the timing (as a worker keeps it)
      const int64_t before = runtime::current_memory_bytes(dev);
      runtime::reset_peak_memory(dev);
      auto st = time_region(dev, cuda ? 1 : 0, cuda ? a.repeat : 1, [&] { got = pipe.decode(lat, &vtrace); });
      nlohmann::json vj = st.to_json();
      vj["peak_memory_gb"] = (runtime::peak_memory_bytes(dev) - before) / 1e9;
      vj["peak_memory_total_gb"] = runtime::peak_memory_bytes(dev) / 1e9;
      vj["host_enqueue_s"] = pipe.last_decode_enqueue_s();  // of the last timed decode
      const double mse = (got - ref).pow(2).mean().item<double>();
      vj["psnr_vs_fp32_db"] = mse > 0 ? 10.0 * std::log10(1.0 / mse) : 100.0;
      vj["rel_l2_vs_fp32"] = ((got - ref).norm() / ref.norm().clamp_min(1e-12)).item<double>();
      vj["flags"] = runtime::techniques::flags_to_json(o);
      vj["trace"] = vtrace.to_json();
      got = at::Tensor();
      out["vae_decode_switches"][label] = vj;
      if (a.profile) {
        runtime::Profiler prof(dev);
        prof.set_detailed(a.profile_detail);
        prof.start();
        pipe.decode(lat);
        prof.stop();
        out["profile"]["vae_decode_" + label] = profile_report(prof, ("vae_decode_" + label).c_str());
      }
      std::fprintf(stderr,
                   "vae_decode_%s: %.3f s median (the host enqueued it in %.3f s), decode's own peak %.1f GB, %.2f dB PSNR vs fp32 "
                   "(rel L2 %.2e)\n",
                   label.c_str(), st.median, vj["host_enqueue_s"].get<double>(), vj["peak_memory_gb"].get<double>(),
                   vj["psnr_vs_fp32_db"].get<double>(), vj["rel_l2_vs_fp32"].get<double>());
    };
    const runtime::RuntimeOptions own = pipe.options();
    if (runtime::techniques::works_on_decode(own)) time_switches("manifest", own);
    for (const auto& path : a.vae_manifests) {
      const auto m = gates::load_manifest(path);
      const auto o = gates::to_runtime_options(m);
      if (!runtime::techniques::works_on_decode(o)) throw Error(path + ": --vae-manifest has no VAE switch on (vae_bf16, vae_channels_last, ...)");
      std::string label = m.id;
      for (auto& ch : label)
        if (ch == '/') ch = '_';
      time_switches(label, o);
    }
    pipe.set_options(own);
  }

  if (a.full_generation) {
    runtime::GenerateParams p = shape;
    p.steps = a.generation_steps;
    p.prompt = "a red fox running through fresh snow";
    runtime::reset_peak_memory(dev);
    log::Progress progress;  // a live line on a terminal, plain lines in a log
    const auto r = pipe.generate(p, [&progress](int64_t i, int64_t n, double s) {
      char b[96];
      std::snprintf(b, sizeof b, "step %lld/%lld %.3f s", static_cast<long long>(i + 1), static_cast<long long>(n), s);
      progress.update("generation", b);
    });
    progress.clear();
    out["generation"] = {{"steps", p.steps},
                         {"text_encoding_s", r.times.text_encoding},
                         {"denoising_s", r.times.denoising},
                         {"decoding_s", r.times.decoding},
                         {"total_s", r.times.total()},
                         {"step_s", runtime::TimingStats::of(r.times.step_seconds).to_json()},
                         {"peak_memory_gb", runtime::peak_memory_bytes(dev) / 1e9},
                         {"forward_skip_ratio", r.trace.has("cache.skip_ratio") ? nlohmann::json(r.trace.get("cache.skip_ratio"))
                                                                                 : nlohmann::json(nullptr)}};
    std::fprintf(stderr, "full generation: %.1f s (denoise %.1f, decode %.1f)\n", r.times.total(), r.times.denoising,
                 r.times.decoding);
  }
  const std::string s = out.dump(2);
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    if (!f) throw Error(a.json + ": cannot write");
    f << s << "\n";
  }
  std::cout << s << "\n";
}

}  // namespace

void add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Time each stage (load, text encoding, transformer forward, denoising step, VAE decode)");
  a->model.add_to(cmd);
  cmd->add_option("--manifest", a->manifest, "Apply this manifest's flags")->check(CLI::ExistingFile);
  cmd->add_option("--steps", a->steps, "Denoising steps to time")->capture_default_str()->check(step_count());
  cmd->add_option("--frames", a->frames, "Frames, 4k+1")->capture_default_str()->check(frames_count());
  cmd->add_option("--height", a->height, "Height, a multiple of 32")->capture_default_str()->check(pixel_size());
  cmd->add_option("--width", a->width, "Width, a multiple of 32")->capture_default_str()->check(pixel_size());
  cmd->add_option("--repeat", a->repeat, "Timed repetitions of each stage after warm-up")->capture_default_str()->check(int_in(1, 1000));
  cmd->add_flag("--skip-vae", a->skip_vae, "Do not time the VAE decode");
  cmd->add_option("--vae-manifest", a->vae_manifests,
                  "Also time the decode under this manifest's VAE switches (repeatable; one fp32 reference, one process)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--vae-only", a->vae_only, "Time only the VAE decode (of random latents): no text encoding, forward or steps");
  cmd->add_flag("--profile", a->profile,
                "Also print where the forward's and the VAE decode's time goes, by category (GEMMs, attention, "
                "norms/elementwise, RoPE, layout copies, other)");
  cmd->add_flag("--profile-detail", a->profile_detail,
                "With --profile: also by operation (each GEMM and convolution shape, self and cross attention, "
                "time/text/rope embedding) with calls, milliseconds and TFLOP/s");
  cmd->add_option("--at-step", a->at_step,
                  "Denoising step the timed forwards stand for (step-dependent techniques, e.g. sparse dense_steps)")
      ->capture_default_str();
  cmd->add_flag("--full-generation", a->full_generation, "Also time one complete generation (CFG, --generation-steps)");
  cmd->add_option("--generation-steps", a->generation_steps, "Steps of the complete generation")->capture_default_str()->check(step_count());
  cmd->add_option("--json", a->json, "Write the results here");
  cmd->callback([a, cmd] {
    {  // the size defaults are the model's official setting (the model table's)
      const models::OfficialRun& o = a->model.facts().official;
      if (cmd->count("--height") == 0) a->height = o.height;
      if (cmd->count("--width") == 0) a->width = o.width;
      if (cmd->count("--frames") == 0) a->frames = o.frames;
    }
    if (a->profile_detail) a->profile = true;
    if (a->vae_only && a->skip_vae) throw CLI::ValidationError("--vae-only", "cannot be combined with --skip-vae");
    run_bench(*a);
  });
}

}  // namespace autooptim::app
