#pragma once
// Training wan22-tiny on the procedural data set (scenes.h) with libtorch autograd:
//   stage 1: the tiny VAE as an autoencoder (L1 reconstruction, object pixels weighted up, a small KL);
//            then latents_mean/std are set from the encoded data set, as the real VAE's are;
//   stage 2: the tiny transformer with Wan's rectified-flow objective: x_t = (1 - s) x0 + s e with s
//            drawn uniformly and shifted as the scheduler shifts its sigmas (flow_shift), timestep
//            1000 s, target e - x0 (noise minus data); captions through the frozen tiny UMT5, replaced
//            by the empty prompt's embedding with probability cfg_dropout (what CFG's negative is);
//            AdamW, gradient clipping, an EMA of the weights (what is exported).
// The output folder is a diffusers checkpoint (model_index.json, transformer/, vae/, text_encoder/,
// tokenizer/, scheduler/) that `--model wan22-tiny --weights DIR` loads; DIR/train_state/ holds what
// --resume needs (raw weights, optimiser moments, counters), DIR/train_log.jsonl the losses and
// DIR/train_info.json the command, seed, device and minutes.
#include <cstdint>
#include <string>

#include "train/scenes.h"

namespace autooptim::train {

struct TrainOptions {
  std::string out;
  bool resume = false;
  std::string vae_from;  // a checkpoint folder whose trained VAE replaces stage 1 (empty: train it)
  // A checkpoint folder whose (exported, EMA) transformer starts stage 2 instead of the random init:
  // training continued from an earlier run (empty: the seed's init). Its train_info.json's
  // device-minutes are added to this run's in train_info.json.
  std::string transformer_from;
  std::string device = "cpu";  // cpu | cuda
  uint64_t seed = 1;
  double minutes = 0;      // total wall-clock budget of both stages (0: none, steps decide)
  double vae_share = 0.3;  // of `minutes`, for stage 1
  // This invocation stops (checkpointed, resumable) after this many minutes even if the budget is not
  // spent: a long run made of several shorter device calls (0: no limit).
  double session_minutes = 0;
  // Likewise, stop this invocation at this transformer step (0: no limit): a reproducible interruption.
  int64_t stop_at_step = 0;
  int64_t vae_steps = -1;  // -1: no step limit (minutes decide)
  int64_t dit_steps = -1;
  int64_t vae_batch = 16;
  int64_t vae_frames = 17;  // 4k+1: clips of stage 1
  int64_t dit_batch = 128;
  int64_t scenes = 4096;                          // stage 2 data set: scenes rendered and encoded once
  SceneMix mix;                                   // how both stages' scenes are drawn (default: the original data set)
  int64_t frames = 49, height = 96, width = 160;  // the tiny model's clip (stage 2)
  double vae_lr = 1e-3, dit_lr = 5e-4;
  // Channel widths of the trained VAE's encoder and decoder (the tiny architecture's are 4 and 4; the
  // latent, 16 channels at 16x spatial and 4x temporal compression, is fixed by the transformer).
  int64_t vae_base_dim = 4, vae_decoder_base_dim = 4;
  double kl_weight = 1e-3;
  double object_weight = 8.0;  // extra L1 weight on the object's pixels in stage 1
  double ema_decay = 0.999;
  double cfg_dropout = 0.1;
  double checkpoint_minutes = 2.0;
  int64_t log_every = 50;
  std::string command_line;  // recorded in train_info.json
};

struct TrainResult {
  int64_t vae_steps = 0, dit_steps = 0;
  double vae_loss = 0, dit_loss = 0;              // mean of the last logged window
  double first_dit_loss = 0, first_vae_loss = 0;  // mean of the first logged window
  double seconds = 0;                             // wall clock of this invocation
  bool finished = false;                          // false: stopped by session_minutes, --resume continues
};

// Runs (or, with resume, continues) both stages and exports the checkpoint. Throws Error on bad options.
TrainResult train_tiny(const TrainOptions& o);

}  // namespace autooptim::train
