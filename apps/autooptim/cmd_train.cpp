// autooptim train: trains wan22-tiny on the procedural data set (src/train). autooptim eval-tiny:
// generates clips for held-out captions and checks their object's colour and motion (or, with --truth,
// checks the renderer's own clips: the checker's own accuracy).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "commands.h"
#include "model_args.h"
#include "models/model_table.h"
#include "gates/manifest.h"
#include "runtime/device.h"
#include "base/error.h"
#include "base/log.h"
#include "runtime/models.h"
#include "runtime/video_io.h"
#include "train/eval_tiny.h"
#include "train/scenes.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace autooptim::app {

namespace {

// Where the run writes (and --resume continues), its device and seed.
void add_train_output_options(CLI::App* cmd, const std::shared_ptr<train::TrainOptions>& o) {
  cmd->add_option("--out", o->out,
                  "Output folder: a diffusers checkpoint (--weights DIR) plus train_state/ for --resume")
      ->required();
  cmd->add_flag("--resume", o->resume, "Continue the run in --out (budgets and step counts are totals over all runs)");
  cmd->add_option("--device", o->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--seed", o->seed, "Seed of the data set, the initial weights and every draw")->capture_default_str();
}

// How long the stages train and where they start: the budgets, the stops of one invocation, an earlier
// run's VAE or transformer.
void add_train_length_options(CLI::App* cmd, const std::shared_ptr<train::TrainOptions>& o) {
  cmd->add_option("--minutes", o->minutes, "Wall-clock budget of both stages together (0: the step counts decide)")
      ->capture_default_str()
      ->check(number_in(0, 100000));
  cmd->add_option("--session-minutes", o->session_minutes,
                  "Stop this invocation after so many minutes, checkpointed (--resume continues toward --minutes)")
      ->capture_default_str()
      ->check(number_in(0, 100000));
  cmd->add_option("--stop-at-step", o->stop_at_step,
                  "Stop this invocation at this transformer step, checkpointed (an interruption)")
      ->capture_default_str()
      ->check(int_in(0, 1000000000));
  cmd->add_option("--vae-from", o->vae_from,
                  "Skip stage 1: take the trained VAE of this checkpoint folder (an earlier --out); all of --minutes "
                  "goes to the transformer "
                  "(with --resume the run keeps the VAE in its state)");
  cmd->add_option(
      "--transformer-from", o->transformer_from,
      "Start stage 2 from the transformer of this checkpoint folder (an earlier --out) instead of the random init: "
      "train it further (its device-minutes are added up in train_info.json)");
  cmd->add_option("--vae-share", o->vae_share, "Share of --minutes for stage 1 (the VAE)")
      ->capture_default_str()
      ->check(number_in(0, 1, true));
  cmd->add_option("--steps", o->dit_steps, "Transformer steps (stage 2); -1: --minutes decides")->capture_default_str();
  cmd->add_option("--vae-steps", o->vae_steps, "VAE steps (stage 1); -1: --minutes decides")->capture_default_str();
}

// The clips and scenes each stage trains on.
void add_train_data_options(CLI::App* cmd, const std::shared_ptr<train::TrainOptions>& o) {
  cmd->add_option("--vae-batch", o->vae_batch, "Clips per VAE step")->capture_default_str()->check(int_in(1, 4096));
  cmd->add_option("--vae-frames", o->vae_frames, "Frames of a VAE training clip (4k+1)")
      ->capture_default_str()
      ->check(frames_count());
  cmd->add_option("--batch", o->dit_batch, "Clips per transformer step")
      ->capture_default_str()
      ->check(int_in(1, 65536));
  cmd->add_option("--scenes", o->scenes, "Scenes in the transformer's data set (rendered and encoded once)")
      ->capture_default_str()
      ->check(int_in(1, 10000000));
  cmd->add_option("--vertical-share", o->mix.vertical_share,
                  "Share of the moving-object and camera-pan scenes that move up or down (-1: the original data set's "
                  "uniform draw over the four directions)")
      ->capture_default_str()
      ->check(number_in(-1, 1));
  cmd->add_option("--frames", o->frames, "Frames of a transformer training clip (the tiny model's 49)")
      ->capture_default_str()
      ->check(frames_count());
}

// Learning rates, the VAE's widths, the losses' weights, the EMA and the prompt dropout.
void add_train_optimiser_options(CLI::App* cmd, const std::shared_ptr<train::TrainOptions>& o) {
  cmd->add_option("--vae-lr", o->vae_lr, "AdamW learning rate of the VAE")
      ->capture_default_str()
      ->check(number_in(0, 1, true));
  cmd->add_option("--vae-width", o->vae_base_dim, "Base channels of the VAE's encoder (the tiny architecture's 4)")
      ->capture_default_str()
      ->check(int_in(1, 256));
  cmd->add_option("--vae-decoder-width", o->vae_decoder_base_dim,
                  "Base channels of the VAE's decoder (the tiny architecture's 4)")
      ->capture_default_str()
      ->check(int_in(1, 256));
  cmd->add_option("--kl-weight", o->kl_weight, "Weight of the VAE's KL term")
      ->capture_default_str()
      ->check(number_in(0, 1));
  cmd->add_option("--object-weight", o->object_weight, "Extra reconstruction weight on the object's pixels (stage 1)")
      ->capture_default_str()
      ->check(number_in(0, 1000));
  cmd->add_option("--lr", o->dit_lr, "AdamW learning rate of the transformer")
      ->capture_default_str()
      ->check(number_in(0, 1, true));
  cmd->add_option("--ema", o->ema_decay, "EMA decay of the exported transformer weights")
      ->capture_default_str()
      ->check(number_in(0, 1));
  cmd->add_option("--cfg-dropout", o->cfg_dropout, "Probability of training on the empty prompt")
      ->capture_default_str()
      ->check(number_in(0, 1));
}

// How often the run checkpoints and logs.
void add_train_checkpoint_options(CLI::App* cmd, const std::shared_ptr<train::TrainOptions>& o) {
  cmd->add_option("--checkpoint-minutes", o->checkpoint_minutes, "Minutes between checkpoints")
      ->capture_default_str()
      ->check(number_in(0, 100000));
  cmd->add_option("--log-every", o->log_every, "Steps per logged (averaged) loss")
      ->capture_default_str()
      ->check(int_in(1, 1000000));
}

// Trains, then says what each stage reached and where the checkpoint is (exit 3: stopped at the session limit).
void train_and_report(const std::shared_ptr<train::TrainOptions>& o) {
  std::string line;
  for (const auto& a : command_line()) line += (line.empty() ? "" : " ") + a;
  o->command_line = line;
  const auto r = train::train_tiny(*o);
  if (r.vae_steps == 0 && r.first_vae_loss == 0)
    std::printf("VAE: not trained here (--vae-from, or --vae-steps 0)\n");
  else
    std::printf("VAE: %lld steps, reconstruction loss %.4f -> %.4f\n", static_cast<long long>(r.vae_steps),
                r.first_vae_loss, r.vae_loss);
  std::printf("transformer: %lld steps, loss %.4f -> %.4f\n", static_cast<long long>(r.dit_steps), r.first_dit_loss,
              r.dit_loss);
  if (!r.finished) {
    std::printf("stopped at the session limit; continue with --resume (the same --out)\n");
    exit_status() = 3;
    return;
  }
  std::printf("checkpoint: %s (load with --model wan22-tiny --weights %s)\n", o->out.c_str(), o->out.c_str());
}

}  // namespace

void add_train(CLI::App& app) {
  auto o = std::make_shared<train::TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train wan22-tiny (VAE, then transformer) on the procedural video data set");
  // CLI11 writes into the bound string when it parses, after this function has returned: it lives as long
  // as the callback that holds it (a local here was written through a dangling reference).
  auto model = std::make_shared<std::string>(models::kDefaultModel);
  cmd->add_option("--model", *model, "Only wan22-tiny can be trained")
      ->check(CLI::IsMember(models::trainable_models()));
  add_train_output_options(cmd, o);
  add_train_length_options(cmd, o);
  add_train_data_options(cmd, o);
  add_train_optimiser_options(cmd, o);
  add_train_checkpoint_options(cmd, o);
  cmd->callback([o, model] { train_and_report(o); });
}

namespace {

struct EvalArgs {
  ModelArgs model;
  int captions = 40;
  int64_t steps = 50;
  double guidance = 5.0;
  int64_t seed = 1000;
  bool truth = false;
  bool vae_roundtrip = false;
  std::string out;
  std::string clips_dir;
  double min_score = -1;
  std::string write_prompts;
  std::string manifest;
};

void run_eval(const EvalArgs& a) {
  const auto scenes = train::heldout_scenes(a.captions);
  std::vector<train::EvalItem> items;
  nlohmann::json meta;
  if (a.truth) {
    // The checker on the renderer's own clips of the same scenes: how far the measurement itself is right.
    for (const auto& s : scenes) {
      const auto r = train::render({s}, 49, 96, 160, at::kCPU);
      items.push_back(train::check(s, ((r.video[0] + 1) / 2).permute({1, 0, 2, 3})));
    }
    meta["source"] = "renderer ground truth";
  } else if (a.vae_roundtrip) {
    // The renderer's clips through the model's VAE (encode, decode): what the transformer's target
    // looks like once decoded, the ceiling of the generated clips' score.
    auto loaded = runtime::load_model(a.model.request());
    auto& vae = loaded.pipeline->vae();
    const auto dev = loaded.pipeline->precision().device;
    at::InferenceMode guard;
    for (const auto& s : scenes) {
      const auto r = train::render({s}, 49, 96, 160, dev);
      const at::Tensor rec = vae->decode(vae->encode(r.video).first);
      const at::Tensor clip = ((rec[0].to(at::kCPU, at::kFloat) + 1) / 2).permute({1, 0, 2, 3}).contiguous();
      items.push_back(train::check(s, clip));
      if (!a.clips_dir.empty()) {
        // Side by side: the rendered clip (left) and its round trip through the VAE (right).
        const at::Tensor truth = ((r.video[0].to(at::kCPU) + 1) / 2).permute({1, 0, 2, 3});
        const auto dir = fs::path(a.clips_dir) / ("roundtrip_" + std::to_string(items.size() - 1));
        try {
          runtime::write_png_frames(dir.string(), runtime::frames_from_tensor(at::cat({truth, clip}, 3)));
        } catch (const Error& e) {
          log::warn(std::string("round-trip frames not written: ") + e.what());
        }
      }
    }
    meta["source"] = "renderer clips through the VAE";
    meta["weights"] = loaded.weights_label;
  } else {
    auto req = a.model.request();
    if (!a.manifest.empty()) {
      // A manifest's switches (a tier from a report): does the accelerated configuration still make what
      // the captions ask? The clips keep the evaluation's own shape, steps, guidance and seeds.
      const auto m = gates::load_manifest(a.manifest);
      if (!models::model_facts(m.model).trainable)
        throw Error(a.manifest + ": a manifest of " + m.model + ", not wan22-tiny");
      use_switches(req, gates::to_runtime_options(m));
      meta["manifest"] = {{"id", m.id}, {"flags", m.flags}};
    }
    auto loaded = runtime::load_model(req);
    log::info("evaluating " + loaded.weights_label + (a.manifest.empty() ? "" : " under " + a.manifest) + " on " +
              std::to_string(scenes.size()) + " held-out captions");
    meta["source"] = "generated";
    meta["weights"] = loaded.weights_label;
    meta["steps"] = a.steps;
    meta["guidance"] = a.guidance;
    log::Progress progress;
    for (size_t i = 0; i < scenes.size(); ++i) {
      runtime::GenerateParams p;
      p.prompt = scenes[i].caption;
      p.height = 96, p.width = 160, p.frames = 49;
      p.steps = a.steps;
      p.guidance = a.guidance;
      p.seed = a.seed + static_cast<int64_t>(i);
      const auto g = loaded.pipeline->generate(p);
      items.push_back(train::check(scenes[i], g.video));
      // The first clip's counters: the manifest's switches did work (the gate's engagement counters).
      if (i == 0 && meta.contains("manifest")) meta["manifest"]["first_clip_counters"] = g.trace.to_json();
      progress.update("eval-tiny", "clip " + std::to_string(i + 1) + "/" + std::to_string(scenes.size()));
      if (!a.clips_dir.empty()) {
        fs::create_directories(a.clips_dir);
        char name[64];
#ifdef AUTOOPTIM_HAVE_VIDEOIO
        std::snprintf(name, sizeof name, "clip_%02zu.mp4", i);
#else
        std::snprintf(name, sizeof name, "clip_%02zu.y4m", i);
#endif
        runtime::write_video((fs::path(a.clips_dir) / name).string(), runtime::frames_from_tensor(g.video), 24.0);
      }
    }
    progress.clear();
  }
  auto rep = train::summarise(std::move(items));
  for (const auto& it : rep.items)
    std::printf("%s %-70s got %-7s %-6s (dx %+6.1f dy %+6.1f)\n", it.color_ok && it.direction_ok ? "ok  " : "MISS",
                it.scene.caption.c_str(), it.got.color.c_str(), it.got.direction.c_str(), it.got.dx, it.got.dy);
  std::printf("score %.1f%% (colour %.1f%%, direction %.1f%%; chance %.1f%%) on %zu held-out captions\n",
              100 * rep.score, 100 * rep.color_accuracy, 100 * rep.direction_accuracy, 100 * train::chance_score(),
              rep.items.size());
  if (!a.out.empty()) {
    nlohmann::json j = rep.to_json();
    j["meta"] = meta;
    std::ofstream f(a.out);
    if (!f) throw Error(a.out + ": cannot write");
    f << j.dump(2) << "\n";
  }
  if (a.min_score >= 0 && rep.score < a.min_score) {
    log::error("score " + std::to_string(rep.score) + " is below --min-score " + std::to_string(a.min_score));
    exit_status() = 1;
  }
}

}  // namespace

void add_eval_tiny(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval-tiny",
                                 "Check that wan22-tiny makes what held-out captions ask (object colour and motion)");
  a->model.add_to(cmd);
  cmd->add_option("--captions", a->captions, "Held-out captions to generate (at most 40)")
      ->capture_default_str()
      ->check(CLI::Range(1, 40));
  cmd->add_option("--steps", a->steps, "Denoising steps")->capture_default_str()->check(step_count());
  cmd->add_option("--guidance", a->guidance, "Classifier-free guidance scale")
      ->capture_default_str()
      ->check(number_in(0, 50));
  cmd->add_option("--seed", a->seed, "Seed of the first clip (clip i uses seed + i)")
      ->capture_default_str()
      ->check(int_in(0, 1000000000));
  cmd->add_flag("--truth", a->truth, "Check the renderer's own clips instead (the checker's accuracy)");
  cmd->add_flag("--vae-roundtrip", a->vae_roundtrip,
                "Check the renderer's clips encoded and decoded by the model's VAE (the ceiling)");
  cmd->add_option("--out", a->out, "Write the per-clip results and the score as JSON here");
  cmd->add_option("--clips-dir", a->clips_dir,
                  "Also write the generated clips here (.mp4, or .y4m without OpenCV videoio)");
  cmd->add_option("--min-score", a->min_score, "Exit 1 when the score (0..1) is below this")->check(number_in(0, 1));
  cmd->add_option("--manifest", a->manifest,
                  "Generate under this manifest's switches (e.g. a report's tiers/2x.json): the score of an "
                  "accelerated configuration")
      ->check(CLI::ExistingFile);
  cmd->add_option("--write-prompts", a->write_prompts,
                  "Write wan22-tiny's prompt set (visible.jsonl, heldout.jsonl: held-out captions of the data set) "
                  "into this folder and exit");
  cmd->callback([a] {
    if (!a->write_prompts.empty()) {
      fs::create_directories(a->write_prompts);
      std::ofstream(fs::path(a->write_prompts) / "visible.jsonl") << train::tiny_prompts_visible_jsonl();
      std::ofstream(fs::path(a->write_prompts) / "heldout.jsonl") << train::tiny_prompts_heldout_jsonl();
      std::printf("wrote %s/visible.jsonl and heldout.jsonl\n", a->write_prompts.c_str());
      return;
    }
    if (!a->model.facts().trainable)
      throw Error("eval-tiny: the held-out captions are wan22-tiny's (--model wan22-tiny)");
    if (!a->manifest.empty() && (a->truth || a->vae_roundtrip))
      throw Error("eval-tiny: --manifest applies to generated clips, not to --truth or --vae-roundtrip");
    run_eval(*a);
  });
}

}  // namespace autooptim::app
