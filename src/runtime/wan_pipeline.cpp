#include "runtime/wan_pipeline.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "runtime/blas_threads.h"
#include "base/cpu_clock.h"
#include "base/process_allocator.h"
#include "base/error.h"
#include "runtime/denoise_feed.h"
#include "runtime/forward_context.h"
#include "runtime/pipeline_interceptor.h"
#include "runtime/techniques/cache/cache_policy.h"
#include "runtime/techniques/registry.h"
#include "runtime/extension_points.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"

namespace autooptim::runtime {

void validate_params(const GenerateParams& p, int64_t pixel_multiple) {
  const std::string why = " (the VAE's spatial factor times the patch)";
  if (p.height <= 0 || p.height % pixel_multiple)
    throw Error("height " + std::to_string(p.height) + " is not a positive multiple of " +
                std::to_string(pixel_multiple) + why);
  if (p.width <= 0 || p.width % pixel_multiple)
    throw Error("width " + std::to_string(p.width) + " is not a positive multiple of " +
                std::to_string(pixel_multiple) + why);
  if (p.frames < 1 || (p.frames - 1) % 4)
    throw Error("frames " + std::to_string(p.frames) + " is not of the form 4k+1 (1, 5, 9, ..., 121)");
  if (p.steps < 1 || p.steps > 1000) throw Error("steps must be between 1 and 1000, got " + std::to_string(p.steps));
  if (!(p.guidance >= 0.0) || p.guidance > 50.0) throw Error("guidance must be between 0 and 50");
  if (p.guidance_2 && (!(*p.guidance_2 >= 0.0) || *p.guidance_2 > 50.0))
    throw Error("guidance_2 must be between 0 and 50");
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

// One denoising step's seconds, forwards and work.
void record_step(StageTimes& times, double secs, int64_t forwards, const WorkCount& work) {
  times.step_seconds.push_back(secs);
  times.step_forwards.push_back(forwards);
  times.step_blocks.push_back(work.blocks);
  times.step_sparse_attention.push_back(work.sparse_self_attention);
}

// What one expert carries through a generation: the technique state made from its weights (the prompt's
// cross-attention K/V, the forward replay, the cache policy's residuals) and the context its forwards run
// in. Made when the expert first runs and never shared, so nothing cached by one expert is reused by the
// other: a cache policy starts afresh at the switch.
struct ExpertRun {
  CrossKVCache cross_kv;
  std::unique_ptr<ForwardReplay> replay;  // declared after the K/V cache: destroyed first (a replay reads it)
  std::unique_ptr<techniques::CachePolicy> cache;
  ForwardContext fc;
};

}  // namespace

void WanPipeline::set_spec(const PipelineSpec& spec, WanTransformer3DModel transformer_2) {
  if (spec.boundary_ratio.has_value() != static_cast<bool>(transformer_2))
    throw Error("pipeline: a boundary_ratio needs a second expert (transformer_2) and a second expert needs one");
  if (spec.boundary_ratio && !(*spec.boundary_ratio >= 0.0 && *spec.boundary_ratio <= 1.0))
    throw Error("pipeline: boundary_ratio must be in [0, 1]");
  if (transformer_2 && transformer_2->config().to_json() != transformer_->config().to_json())
    throw Error("pipeline: the two experts' transformer configs differ");
  spec_ = spec;
  transformer_2_ = std::move(transformer_2);
}

int WanPipeline::expert_for(double t) const {
  if (!spec_.boundary_ratio) return 0;
  return t >= *spec_.boundary_ratio * static_cast<double>(scheduler_config_.num_train_timesteps) ? 0 : 1;
}

int64_t WanPipeline::pixel_multiple() const {
  const auto& pc = transformer_->config().patch_size;
  return vae_->config().scale_factor_spatial * std::max(pc[1], pc[2]);
}

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
  const bool cfg = in.negative_embeds.defined() && in.guidance > 1.0;  // as diffusers: CFG only above 1
  const at::Tensor pos = in.prompt_embeds.to(dev, dt);
  const at::Tensor neg = cfg ? in.negative_embeds.to(dev, dt) : at::Tensor();
  const DenoiseFeed feed(spec_, in.condition, latents, transformer_->config().patch_size);

  std::optional<RuntimeOptions> sparse_options;  // the loop's options where an interceptor changes sparse's
  if (ic) {
    sparse_options = options;
    ic->sparse_dense_work(sparse_options->of<SparseAttentionOptions>());
  }
  RuntimeOptions cache_options = options;  // the cache family's policy sees every transformer call
  if (ic) ic->cache_policy_options(cache_options);
  int64_t step_forwards = 0;
  WorkCount step_work;
  std::array<std::unique_ptr<ExpertRun>, 2> experts;  // per generation: nothing survives into the next
  auto expert = [&](int e) -> ExpertRun& {
    if (!experts[e]) {
      auto r = std::make_unique<ExpertRun>();
      r->replay = ext::make_forward_replay(options);
      r->cache = techniques::make_cache_policy(cache_options, in.steps, trace);
      r->fc.options = sparse_options ? &*sparse_options : &options;
      r->fc.trace = trace;
      r->fc.cross_kv = &r->cross_kv;
      r->fc.replay = r->replay.get();
      r->fc.steps = in.steps;
      r->fc.cache = r->cache.get();
      r->fc.work = &step_work;
      experts[e] = std::move(r);
    }
    return *experts[e];
  };
  const int discarded = ic ? ic->discarded_forwards(options) : 0;
  auto velocity = [&](int e, int64_t step, int branch, const at::Tensor& model_in, const at::Tensor& timestep,
                      const at::Tensor& embeds) {
    ExpertRun& run = expert(e);
    WanTransformer3DModel& model = e == 0 ? transformer_ : transformer_2_;
    run.fc.step = step;
    run.fc.branch = branch;
    auto full = [&] {
      if (trace) trace->add("transformer.forwards");
      ++step_forwards;
      for (int k = 0; k < discarded; ++k) {
        ForwardContext hidden = run.fc;  // an interceptor's discarded forwards: uncounted
        hidden.work = nullptr;
        hidden.trace = nullptr;
        model->forward(model_in, timestep, embeds, nullptr, &hidden);
      }
      return model->forward(model_in, timestep, embeds, nullptr, &run.fc).to(at::kFloat);
    };
    return run.cache ? run.cache->forward(step, branch, model_in, full) : full();
  };
  for (int64_t i = 0; i < in.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step_forwards = 0;
    step_work = WorkCount{};
    const double t = static_cast<double>(sched.timesteps()[static_cast<size_t>(i)]);
    const int e = expert_for(t);
    const double guidance = e == 1 && in.guidance_2 ? *in.guidance_2 : in.guidance;
    const at::Tensor model_in = feed.model_input(latents).to(dt);
    const at::Tensor timestep = feed.timestep(t, B);
    at::Tensor v = velocity(e, i, 0, model_in, timestep, pos);
    if (cfg) {
      const at::Tensor vu = velocity(e, i, 1, model_in, timestep, neg);
      v = vu + guidance * (v - vu);  // in float32
    }
    latents = sched.step(v, latents);
    if (!at::isfinite(latents).all().item<bool>())
      throw NumericError("denoising step " + std::to_string(i) + " produced NaN or Inf latents");
    if (per_step) per_step->push_back(latents.to(at::kCPU));
    const double secs = synced_seconds_since(t0, dev);
    if (times) record_step(*times, secs, step_forwards, step_work);
    if (on_step) on_step(i, in.steps, secs);
  }
  return feed.final_latents(latents);
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

at::Tensor WanPipeline::encode_condition(const at::Tensor& image, int64_t frames) {
  at::InferenceMode guard;
  const auto& vc = vae_->config();
  if (image.dim() != 4 || image.size(1) != 3) throw Error("encode_condition: image must be [B, 3, H, W]");
  if (frames < 1 || (frames - 1) % vc.scale_factor_temporal)
    throw Error("encode_condition: frames must be 1 + " + std::to_string(vc.scale_factor_temporal) + "k");
  const at::Tensor first = (image.to(precision_.device, at::kFloat) * 2 - 1).unsqueeze(2);  // [B, 3, 1, H, W]
  const int64_t B = image.size(0), H = image.size(2), W = image.size(3);
  const at::Tensor video = at::cat({first, at::zeros({B, 3, frames - 1, H, W}, first.options())}, 2);
  const at::Tensor latents = vae_->normalize(vae_->encode(video).first.to(at::kFloat));  // [B, z, T', h, w]
  // 1 on the first latent frame (the reference's per-frame mask, its first frame repeated to fill the
  // temporal factor, folded into 4 channels), 0 elsewhere.
  at::Tensor mask =
      at::zeros({B, vc.scale_factor_temporal, latents.size(2), latents.size(3), latents.size(4)}, latents.options());
  mask.select(2, 0).fill_(1.0);
  return at::cat({mask, latents}, 1);
}

at::Tensor WanPipeline::condition_of(const at::Tensor& image, int64_t frames) {
  return spec_.expand_timesteps ? encode_image(image) : encode_condition(image, frames);
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
  validate_params(p, pixel_multiple());
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
  validate_params(p, pixel_multiple());
  at::InferenceMode guard;
  GenerateResult r;
  const auto dev = precision_.device;
  const auto& vc = vae_->config();
  const int64_t sf = vc.scale_factor_spatial, tf = vc.scale_factor_temporal;
  if (!p.image && transformer_->config().in_channels != vc.z_dim)
    throw Error(
        "this is an image-to-video model (its transformer takes the image's channels): a generation needs "
        "an image");

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
    in.condition = condition_of(img.unsqueeze(0), p.frames);
    r.times.image_encoding = synced_seconds_since(t0, dev);
  }

  // Initial noise from a CPU generator so a seed gives the same clip on every device.
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(p.seed));
  const int64_t T = (p.frames - 1) / tf + 1;
  in.latents = at::randn({1, vc.z_dim, T, p.height / sf, p.width / sf}, gen, at::kFloat);
  in.steps = p.steps;
  in.guidance = p.guidance;
  in.guidance_2 = p.guidance_2;

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
