#include "runtime/wan_pipeline.h"

#include <ATen/Parallel.h>

#include <chrono>

#include "runtime/blas_threads.h"
#include "base/cpu_clock.h"
#include "base/process_allocator.h"
#include "base/error.h"
#include "runtime/forward_context.h"
#include "runtime/pipeline_interceptor.h"
#include "runtime/techniques/cache/cache_policy.h"
#include "runtime/techniques/registry.h"
#include "runtime/extension_points.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"

namespace autooptim::runtime {

void validate_params(const GenerateParams& p) {
  if (p.height <= 0 || p.height % 32)
    throw Error("height " + std::to_string(p.height) + " is not a positive multiple of 32 (VAE 16x times patch 2)");
  if (p.width <= 0 || p.width % 32)
    throw Error("width " + std::to_string(p.width) + " is not a positive multiple of 32 (VAE 16x times patch 2)");
  if (p.frames < 1 || (p.frames - 1) % 4)
    throw Error("frames " + std::to_string(p.frames) + " is not of the form 4k+1 (1, 5, 9, ..., 121)");
  if (p.steps < 1 || p.steps > 1000) throw Error("steps must be between 1 and 1000, got " + std::to_string(p.steps));
  if (!(p.guidance >= 0.0) || p.guidance > 50.0) throw Error("guidance must be between 0 and 50");
  if (p.seed < 0) throw Error("seed must be non-negative");
  if (!(p.fps > 0.0)) throw Error("fps must be positive");
}

WanPipeline::WanPipeline(WanTransformer3DModel transformer, AutoencoderKLWan vae,
                         std::shared_ptr<UMT5EncoderModel> text_encoder, std::shared_ptr<Tokenizer> tokenizer,
                         UniPCConfig scheduler, Precision precision, RuntimeOptions options)
    : transformer_(std::move(transformer)),
      vae_(std::move(vae)),
      text_encoder_(std::move(text_encoder)),
      tokenizer_(std::move(tokenizer)),
      scheduler_config_(std::move(scheduler)),
      precision_(precision),
      options_(std::move(options)) {
  set_options(options_);
}

void WanPipeline::set_options(const RuntimeOptions& o) {
  options_ = o;
  settle_blas_threads();  // once per process: OpenBLAS's own threads would fight libtorch's (blas_threads.h)
  settle_allocator();     // once per process: allocation cost independent of the process's history
  // libtorch's own thread count (OMP_NUM_THREADS, else its default) unless the options name one.
  static const int initial_threads = at::get_num_threads();
  const int want = o.cpu_threads > 0 ? static_cast<int>(o.cpu_threads) : initial_threads;
  if (at::get_num_threads() != want) at::set_num_threads(want);
  at::globalContext().setUserEnabledMkldnn(o.onednn);
}

at::Tensor WanPipeline::denoise(const DenoiseInputs& in, std::vector<at::Tensor>* per_step, const StepCallback& on_step,
                                Trace* trace, StageTimes* times) {
  return denoise_with(options_, in, per_step, on_step, trace, times, interceptor_);
}

namespace {

// The latent mask [1, 1, T', h, w] per transformer token: [T'/pt, h/ph, w/pw] -> [L].
at::Tensor token_mask_of(const at::Tensor& mask, const std::vector<int64_t>& pc) {
  return mask[0][0]
      .slice(0, 0, c10::nullopt, pc[0])
      .slice(1, 0, c10::nullopt, pc[1])
      .slice(2, 0, c10::nullopt, pc[2])
      .reshape({-1});
}

// One denoising step's seconds, forwards and work.
void record_step(StageTimes& times, double secs, int64_t forwards, const WorkCount& work) {
  times.step_seconds.push_back(secs);
  times.step_forwards.push_back(forwards);
  times.step_blocks.push_back(work.blocks);
  times.step_sparse_attention.push_back(work.sparse_self_attention);
}

}  // namespace

at::Tensor WanPipeline::denoise_with(const RuntimeOptions& options, const DenoiseInputs& asked,
                                     std::vector<at::Tensor>* per_step, const StepCallback& on_step, Trace* trace,
                                     StageTimes* times, PipelineInterceptor* ic) {
  DenoiseInputs intercepted;  // an interceptor may run another number of steps than asked
  if (ic) {
    intercepted = asked;
    intercepted.steps = ic->denoising_steps(options, asked.steps);
  }
  const DenoiseInputs& in = ic ? intercepted : asked;
  at::InferenceMode guard;
  const auto dev = precision_.device;
  const auto dt = precision_.compute;
  UniPCScheduler sched(scheduler_config_);
  sched.set_timesteps(in.steps);
  at::Tensor latents = in.latents.to(dev, at::kFloat);  // [B, z, T', h, w]
  const int64_t B = latents.size(0);
  const auto& pc = transformer_->config().patch_size;
  const bool cfg = in.negative_embeds.defined() && in.guidance > 1.0;  // as diffusers: CFG only above 1
  const at::Tensor pos = in.prompt_embeds.to(dev, dt);
  const at::Tensor neg = cfg ? in.negative_embeds.to(dev, dt) : at::Tensor();

  // TI2V: mask 0 on latent frame 0 (the image), 1 elsewhere; a token's timestep is mask * t.
  at::Tensor mask = at::ones({1, 1, latents.size(2), latents.size(3), latents.size(4)}, latents.options());
  at::Tensor condition;
  if (in.condition.defined()) {
    condition = in.condition.to(dev, at::kFloat);
    mask.select(2, 0).zero_();
  }
  const at::Tensor token_mask = token_mask_of(mask, pc);
  // Per-generation technique state: nothing here survives into the next generation.
  CrossKVCache cross_kv;
  // Declared after the K/V cache: destroyed first, as a replayed forward reads it.
  const std::unique_ptr<ForwardReplay> replay = ext::make_forward_replay(options);
  std::optional<RuntimeOptions> sparse_options;  // the loop's options where an interceptor changes sparse's
  if (ic) {
    sparse_options = options;
    ic->sparse_dense_work(sparse_options->of<SparseAttentionOptions>());
  }
  ForwardContext fc;
  fc.options = sparse_options ? &*sparse_options : &options;
  fc.trace = trace;
  fc.cross_kv = &cross_kv;
  fc.replay = replay.get();
  fc.steps = in.steps;
  // The cache family's policy sees every transformer call (and, through fc, the block stack).
  RuntimeOptions cache_options = options;
  if (ic) ic->cache_policy_options(cache_options);
  const std::unique_ptr<techniques::CachePolicy> cache = techniques::make_cache_policy(cache_options, in.steps, trace);
  fc.cache = cache.get();
  const int discarded = ic ? ic->discarded_forwards(options) : 0;
  int64_t step_forwards = 0;
  WorkCount step_work;
  fc.work = &step_work;
  auto velocity = [&](int64_t step, int branch, const at::Tensor& model_in, const at::Tensor& timestep,
                      const at::Tensor& embeds) {
    fc.branch = branch;
    auto full = [&] {
      if (trace) trace->add("transformer.forwards");
      ++step_forwards;
      for (int k = 0; k < discarded; ++k) {
        ForwardContext hidden = fc;  // an interceptor's discarded forwards: uncounted
        hidden.work = nullptr;
        hidden.trace = nullptr;
        transformer_->forward(model_in, timestep, embeds, nullptr, &hidden);
      }
      return transformer_->forward(model_in, timestep, embeds, nullptr, &fc).to(at::kFloat);
    };
    return cache ? cache->forward(step, branch, model_in, full) : full();
  };
  for (int64_t i = 0; i < in.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fc.step = i;
    step_forwards = 0;
    step_work = WorkCount{};
    const double t = static_cast<double>(sched.timesteps()[static_cast<size_t>(i)]);
    at::Tensor model_in = condition.defined() ? (1 - mask) * condition + mask * latents : latents;
    model_in = model_in.to(dt);
    const at::Tensor timestep = (token_mask * t).unsqueeze(0).expand({B, -1});  // [B, L] float32
    at::Tensor v = velocity(i, 0, model_in, timestep, pos);
    if (cfg) {
      const at::Tensor vu = velocity(i, 1, model_in, timestep, neg);
      v = vu + in.guidance * (v - vu);  // in float32
    }
    latents = sched.step(v, latents);
    if (!at::isfinite(latents).all().item<bool>())
      throw NumericError("denoising step " + std::to_string(i) + " produced NaN or Inf latents");
    if (per_step) per_step->push_back(latents.to(at::kCPU));
    const double secs = synced_seconds_since(t0, dev);
    if (times) record_step(*times, secs, step_forwards, step_work);
    if (on_step) on_step(i, in.steps, secs);
  }
  if (condition.defined()) latents = (1 - mask) * condition + mask * latents;
  return latents;
}

AutoencoderKLWan& WanPipeline::decoding_vae() { return decoding_vae(options_); }

AutoencoderKLWan& WanPipeline::decoding_vae(const RuntimeOptions& o) {
  // The decode's dtype and layout, as the decode-precision and layout points say.
  const ext::DecodePoints d = ext::DecodePoints::resolve(o);
  const bool bf16 = d.dtype == at::kBFloat16, cl = d.channels_last;
  if (!bf16 && !cl) return vae_;
  const int key = 2 * bf16 + cl;
  if (converted_vae_key_ != key) {
    converted_vae_ = nullptr;  // one converted copy at a time
    at::NoGradGuard g;
    const Precision p{bf16 ? at::kBFloat16 : vae_->precision().compute, vae_->precision().device};
    AutoencoderKLWan v(vae_->config(), p);
    auto src = vae_->named_parameters();
    for (auto& q : v->named_parameters()) {
      at::Tensor t = src[q.key()].to(q.value().scalar_type());
      if (cl && t.dim() == 5) t = t.contiguous(at::MemoryFormat::ChannelsLast3d);
      if (cl && t.dim() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
      // A tensor left as it was (a bias under channels_last alone) is the loaded VAE's own, an inference
      // tensor when loaded under InferenceMode: set_data would refuse it. The copy owns its storage.
      if (t.is_same(src[q.key()]) || t.is_inference()) t = t.clone();
      q.value().set_data(t);
    }
    converted_vae_ = v;
    converted_vae_key_ = key;
  }
  return converted_vae_;
}

at::Tensor WanPipeline::decode(const at::Tensor& latents, Trace* trace) {
  return decode_with(options_, latents, trace);
}

at::Tensor WanPipeline::decode_with(const RuntimeOptions& o, const at::Tensor& latents, Trace* trace) {
  at::InferenceMode guard;
  const at::Tensor z = vae_->denormalize(latents.to(precision_.device, at::kFloat));
  const bool switches = techniques::works_on_decode(o);  // a technique with a vae.* or pipeline.decode hook
  const VaeRun run{&o, trace};
  // The stages around the decode (a library setting for it, restored afterwards, also on an error).
  const ext::DecodePoints decode_points = ext::DecodePoints::resolve(o);
  std::vector<std::unique_ptr<ext::DecodeStage>> stages;
  for (const auto* stage : decode_points.stages)
    if (auto s = (*stage)(z, run)) stages.push_back(std::move(s));
  const auto enqueue_t0 = std::chrono::steady_clock::now();
  at::Tensor video = decoding_vae(o)->decode(z, nullptr, switches ? &run : nullptr);  // [B, 3, T, H, W] in [-1, 1]
  for (const auto& s : stages) s->decoded(run);
  video = (video.to(at::kFloat) / 2 + 0.5).clamp(0, 1);
  last_decode_enqueue_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueue_t0).count();
  if (!at::isfinite(video).all().item<bool>()) throw NumericError("VAE decode produced NaN or Inf pixels");
  return video;
}

at::Tensor WanPipeline::encode_image(const at::Tensor& image) {
  at::InferenceMode guard;
  const at::Tensor x = (image.to(precision_.device, at::kFloat) * 2 - 1).unsqueeze(2);  // [B, 3, 1, H, W]
  const auto [mu, logvar] = vae_->encode(x);
  return vae_->normalize(mu.to(at::kFloat));
}

at::Tensor WanPipeline::encode_text(const std::vector<std::string>& prompts, bool trim, int64_t* tokens_saved,
                                    int64_t* tokens_run) {
  if (!text_encoder_ || !tokenizer_) throw Error("this pipeline has no text encoder");
  at::InferenceMode guard;
  int64_t saved = 0;
  at::Tensor embeds =
      encode_prompts(*text_encoder_, *tokenizer_, prompts, max_text_length, precision_.compute, trim, &saved);
  if (tokens_saved) *tokens_saved = saved;
  if (tokens_run) *tokens_run += static_cast<int64_t>(prompts.size()) * max_text_length - saved;
  return embeds;
}

GenerateResult WanPipeline::generate(const GenerateParams& p, const StepCallback& on_step, at::Tensor* out_video) {
  validate_params(p);
  at::InferenceMode guard;
  const RuntimeOptions options = options_;
  PipelineInterceptor* const ic = interceptor_;
  if (!ic) return generate_with(options, p, on_step, out_video, nullptr);
  if (auto early = ic->before_generation(*this, options, p, out_video)) return std::move(*early);
  GenerateResult r = generate_with(options, p, on_step, out_video, ic);
  ic->after_generation(*this, options, p, r);
  return r;
}

GenerateResult WanPipeline::generate_without_interceptor(const RuntimeOptions& o, const GenerateParams& p,
                                                         at::Tensor* out_video) {
  return generate_with(o, p, {}, out_video, nullptr);
}

GenerateResult WanPipeline::generate_with(const RuntimeOptions& options, const GenerateParams& p,
                                          const StepCallback& on_step, at::Tensor* out_video, PipelineInterceptor* ic) {
  validate_params(p);
  at::InferenceMode guard;
  GenerateResult r;
  const auto dev = precision_.device;
  const auto& vc = vae_->config();
  const int64_t sf = vc.scale_factor_spatial, tf = vc.scale_factor_temporal;

  auto t0 = std::chrono::steady_clock::now();
  DenoiseInputs in;
  int64_t saved = 0, saved_negative = 0;
  const ext::TextEncoding text = ext::resolve_text_encoding(options);
  auto encode = [&](const std::string& prompt, int64_t* s) {
    const at::Tensor given = ic ? ic->text_embeddings(*this, options, prompt, s, &r.times.text_tokens) : at::Tensor();
    if (given.defined()) return given;
    return encode_text({prompt}, text.prompt_tokens_only, s, &r.times.text_tokens);
  };
  in.prompt_embeds = encode(p.prompt, &saved);
  if (p.guidance > 1.0) in.negative_embeds = encode(p.negative_prompt, &saved_negative);
  r.times.text_encoding = synced_seconds_since(t0, dev);
  if (!text.tokens_saved_counter.empty())
    r.trace.add(text.tokens_saved_counter, static_cast<double>(saved + saved_negative));

  if (p.image) {
    t0 = std::chrono::steady_clock::now();
    at::Tensor img = p.image->to(at::kFloat);
    if (img.dim() != 3 || img.size(0) != 3) throw Error("image must be [3, H, W]");
    if (img.size(1) != p.height || img.size(2) != p.width)
      img = at::upsample_bicubic2d(img.unsqueeze(0), {p.height, p.width}, false).squeeze(0).clamp(0, 1);
    in.condition = encode_image(img.unsqueeze(0));
    r.times.image_encoding = synced_seconds_since(t0, dev);
  }

  // Initial noise from a CPU generator so a seed gives the same clip on every device.
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(p.seed));
  const int64_t T = (p.frames - 1) / tf + 1;
  in.latents = at::randn({1, vc.z_dim, T, p.height / sf, p.width / sf}, gen, at::kFloat);
  in.steps = p.steps;
  in.guidance = p.guidance;

  t0 = std::chrono::steady_clock::now();
  const double cpu0 = base::process_cpu_seconds();
  r.latents = denoise_with(options, in, nullptr, on_step, &r.trace, &r.times, ic);
  r.times.denoising = synced_seconds_since(t0, dev);
  r.times.denoising_cpu = base::process_cpu_seconds() - cpu0;

  t0 = std::chrono::steady_clock::now();
  r.video =
      decode_with(options, r.latents, &r.trace)[0].permute({1, 0, 2, 3}).contiguous().to(at::kCPU);  // [T, 3, H, W]
  if (ic) ic->decoded(options, r.video);
  r.times.decoding = synced_seconds_since(t0, dev);
  if (out_video) {
    if (out_video->sizes() != r.video.sizes()) throw Error("output buffer has the wrong shape for this clip");
    out_video->copy_(r.video);
    r.video = *out_video;
  }
  return r;
}

}  // namespace autooptim::runtime
