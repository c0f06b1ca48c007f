#pragma once
// The Wan2.2 pipelines (diffusers' WanPipeline and WanImageToVideoPipeline), classifier-free guidance,
// UniPC: TI2V-5B's (expand_timesteps: a timestep per token, the image's latent on frame 0) and the A14B
// models' (two experts switched at a boundary timestep, each with its guidance scale; I2V conditions on
// channels: a first-frame mask and the latents of the image followed by black frames).
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/options.h"
#include "runtime/trace.h"
#include "runtime/umt5.h"
#include "runtime/unipc_scheduler.h"
#include "runtime/wan_transformer.h"
#include "runtime/wan_vae.h"

namespace autooptim::runtime {

class PipelineInterceptor;  // runtime/pipeline_interceptor.h

struct GenerateParams {
  std::string prompt;
  std::string negative_prompt;      // diffusers' default is empty
  std::optional<at::Tensor> image;  // [3, H, W] float in [0, 1], any size: resized to height x width
  int64_t height = 704;
  int64_t width = 1280;
  int64_t frames = 121;
  int64_t steps = 50;
  double guidance = 5.0;
  // The second expert's guidance scale (A14B); unset: guidance, as the reference.
  std::optional<double> guidance_2;
  int64_t seed = 42;
  double fps = 24.0;
};

// How the pipeline feeds its transformer(s): the checkpoint's model_index.json, or the model table's.
struct PipelineSpec {
  // True (TI2V-5B): one timestep per token, 0 on an image's latent frame, which is re-imposed after every
  // step. False (A14B): one timestep per sample; I2V concatenates the conditioning channels to the latents.
  bool expand_timesteps = true;
  // Two experts: the first runs the timesteps t >= boundary_ratio * 1000 (num_train_timesteps), the second
  // (transformer_2) the rest. Unset: one transformer.
  std::optional<double> boundary_ratio;
};

// Checks sizes: height and width multiples of pixel_multiple (the VAE's spatial factor times the patch:
// 32 for TI2V-5B, 16 for A14B; WanPipeline::pixel_multiple()), frames 4k+1, steps >= 1.
void validate_params(const GenerateParams& p, int64_t pixel_multiple = 32);

struct StageTimes {
  double text_encoding = 0;  // seconds, synchronised
  // Token rows the text encoder ran for the prompt and the negative prompt (counted in encode_text, where
  // it runs): max_text_length per prompt, fewer under text_trim by exactly its tokens_saved counter.
  int64_t text_tokens = 0;
  double image_encoding = 0;
  double denoising = 0;
  double denoising_cpu = 0;  // CPU seconds of the whole process (every thread) during the denoising
  double decoding = 0;
  std::vector<double> step_seconds;
  std::vector<int64_t> step_forwards;          // transformer forwards run in each step (counted by the loop)
  std::vector<int64_t> step_blocks;            // transformer blocks run in each step (counted where they run)
  std::vector<int64_t> step_sparse_attention;  // self-attention calls on the sparse path in each step
  double total() const { return text_encoding + image_encoding + denoising + decoding; }
};

struct GenerateResult {
  at::Tensor video;    // [T, 3, H, W] float32 in [0, 1], CPU
  at::Tensor latents;  // [1, z_dim, T', h, w] float32, final (after re-imposing the image latent)
  StageTimes times;
  Trace trace;
};

// Called after each denoising step with (step index, steps, seconds of that step).
using StepCallback = std::function<void(int64_t, int64_t, double)>;

struct DenoiseInputs {
  at::Tensor latents;          // [B, z, T', h, w] float32 initial noise
  at::Tensor prompt_embeds;    // [B, S, text_dim]
  at::Tensor negative_embeds;  // [B, S, text_dim] or undefined (no CFG)
  // I2V: [B, z, 1, h, w] the normalised image latent (expand_timesteps), or [B, 4 + z, T', h, w] the
  // first-frame mask and the normalised latents of the conditioning video (A14B); undefined for T2V.
  at::Tensor condition;
  int64_t steps = 50;
  double guidance = 5.0;
  std::optional<double> guidance_2;  // the second expert's (unset: guidance)
};

class WanPipeline {
 public:
  WanPipeline(WanTransformer3DModel transformer, AutoencoderKLWan vae, std::shared_ptr<UMT5EncoderModel> text_encoder,
              std::shared_ptr<Tokenizer> tokenizer, UniPCConfig scheduler, Precision precision,
              RuntimeOptions options = {});

  // The denoising loop alone. per_step (optional) gets the scheduler's latents after each step (before
  // the final re-imposition of the image latent). Returns the final latents (re-imposed for I2V).
  at::Tensor denoise(const DenoiseInputs& in, std::vector<at::Tensor>* per_step = nullptr,
                     const StepCallback& on_step = {}, Trace* trace = nullptr, StageTimes* times = nullptr);

  // Raw latents -> video [B, 3, T, H, W] in [0, 1] (un-normalises with latents_mean/std first), through
  // the VAE kernel switches of the options (techniques/vae/); their engagement is counted in trace.
  at::Tensor decode(const at::Tensor& latents, Trace* trace = nullptr);
  // The VAE the options decode with: the model's own (float32, as loaded) unless vae_bf16 or
  // vae_channels_last ask for a converted copy, made once and kept until other settings ask for another.
  AutoencoderKLWan& decoding_vae();
  // Host seconds the last decode took to enqueue its work, up to the check of its pixels (the decode's
  // first synchronisation). Far below the decode's time: the device never waited for the host. Close to
  // it: either the host's launches are the bottleneck or the host waited on a full launch queue; the run
  // with CUDA_LAUNCH_BLOCKING=1 tells them apart (docs/journal/2026-12-05.md, sixth session).
  double last_decode_enqueue_s() const { return last_decode_enqueue_s_; }
  // Image [B, 3, H, W] in [0, 1] -> normalised conditioning latent [B, z, 1, H/s, W/s].
  at::Tensor encode_image(const at::Tensor& image);
  // The A14B I2V condition of a clip of `frames` frames: the image followed by black frames, encoded and
  // normalised, after a 4-channel mask that is 1 on the first latent frame: [B, 4 + z, T', H/s, W/s].
  at::Tensor encode_condition(const at::Tensor& image, int64_t frames);
  // The condition generate() makes of an image for this pipeline's spec.
  at::Tensor condition_of(const at::Tensor& image, int64_t frames);
  // Prompts -> [B, 512, text_dim] embeddings (rows past each prompt's length zeroed). trim: the
  // text_trim switch (encode_prompts); *tokens_saved gets the token rows it did not encode, and the rows it
  // did encode are added to *tokens_run.
  at::Tensor encode_text(const std::vector<std::string>& prompts, bool trim = false, int64_t* tokens_saved = nullptr,
                         int64_t* tokens_run = nullptr);

  // out_video (optional): a [T, 3, H, W] float32 CPU buffer the clip is written into (the gate
  // harness poisons it with NaN first, so a run that does not write its output is caught).
  GenerateResult generate(const GenerateParams& p, const StepCallback& on_step = {}, at::Tensor* out_video = nullptr);

  WanTransformer3DModel& transformer() { return transformer_; }
  // The second expert (null with one transformer).
  WanTransformer3DModel& transformer_2() { return transformer_2_; }
  const PipelineSpec& spec() const { return spec_; }
  int64_t pixel_multiple() const;
  // Sets how the transformer is fed and, with spec.boundary_ratio, the second expert (same config).
  void set_spec(const PipelineSpec& spec, WanTransformer3DModel transformer_2 = nullptr);
  // The expert that runs timestep t: 0 (transformer) or 1 (transformer_2).
  int expert_for(double t) const;
  AutoencoderKLWan& vae() { return vae_; }
  const Precision& precision() const { return precision_; }
  const RuntimeOptions& options() const { return options_; }
  // Also applies the process-wide settings: cpu_threads and onednn.
  void set_options(const RuntimeOptions& o);
  // Installs the interceptor that sees every generation from now on (null: none, the honest path). The caller
  // owns it and keeps it alive while it is installed.
  void set_interceptor(PipelineInterceptor* interceptor) { interceptor_ = interceptor; }
  // A generation under `o` that no interceptor sees: what an interceptor itself runs to make a clip honestly.
  GenerateResult generate_without_interceptor(const RuntimeOptions& o, const GenerateParams& p,
                                              at::Tensor* out_video = nullptr);
  int64_t max_text_length = 512;

 private:
  double last_decode_enqueue_s_ = 0;
  WanTransformer3DModel transformer_;
  WanTransformer3DModel transformer_2_{nullptr};
  PipelineSpec spec_;
  AutoencoderKLWan vae_;
  std::shared_ptr<UMT5EncoderModel> text_encoder_;
  std::shared_ptr<Tokenizer> tokenizer_;
  UniPCConfig scheduler_config_;
  Precision precision_;
  RuntimeOptions options_;
  AutoencoderKLWan converted_vae_{nullptr};
  int converted_vae_key_ = -1;                  // 2 * bf16 + channels_last of converted_vae_
  PipelineInterceptor* interceptor_ = nullptr;  // not owned

  // generate() and denoise() under options `o` (a snapshot: set_options may change options_ meanwhile),
  // seen by the interceptor `ic` (null: none).
  GenerateResult generate_with(const RuntimeOptions& o, const GenerateParams& p, const StepCallback& on_step,
                               at::Tensor* out_video, PipelineInterceptor* ic);
  at::Tensor denoise_with(const RuntimeOptions& o, const DenoiseInputs& asked, std::vector<at::Tensor>* per_step,
                          const StepCallback& on_step, Trace* trace, StageTimes* times, PipelineInterceptor* ic);
  at::Tensor decode_with(const RuntimeOptions& o, const at::Tensor& latents, Trace* trace);
  AutoencoderKLWan& decoding_vae(const RuntimeOptions& o);
};

}  // namespace autooptim::runtime
