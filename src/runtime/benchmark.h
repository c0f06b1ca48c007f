#pragma once
// Stage timing for `autooptim bench`: each stage of the pipeline (text encoding, one transformer forward,
// the denoising steps, the VAE decode, a whole generation) timed with device events after warm-up, with
// medians, spread, peak memory and FLOP-based efficiency against the measured matmul peak. The command
// (apps/autooptim/cmd_bench.cpp) parses options and prints; the measuring is here.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/stats.h"
#include "runtime/models.h"

namespace autooptim::runtime {

struct BenchSettings {
  int64_t steps = 3, frames = 121, height = 704, width = 1280;
  int64_t repeat = 3;     // timed repetitions of each stage after warm-up
  bool skip_vae = false;  // no VAE decode
  bool vae_only = false;  // the VAE decode alone, of random latents
  bool full_generation = false;
  int64_t generation_steps = 50;
  bool profile = false, profile_detail = false;
  int64_t at_step = 0;  // the denoising step the timed forwards stand for
  // More VAE switches to time through the pipeline's decode: (label, options), each against the float32 decode.
  std::vector<std::pair<std::string, RuntimeOptions>> vae_switches;
};

// What a benchmark says while it runs: a line per stage (for stderr), and the steps of the full generation.
struct BenchReporter {
  std::function<void(const std::string& line)> line;
  std::function<void(int64_t step, int64_t steps, double seconds)> generation_step;
  std::function<void()> generation_done;
};

// Dense matmul rate (TFLOP/s) on this device in its compute dtype: the ceiling efficiency is measured against.
double measured_peak_tflops(const Precision& p);

// `f` run `warmup` times, then timed `repeat` times with device events.
TimingStats time_region(const at::Device& dev, int64_t warmup, int64_t repeat, const std::function<void()>& f);

// Error for a shape the pipeline cannot run or a repeat count below 1.
// Sizes: multiples of the model's pixel_multiple (its table's), frames 4k+1, steps and repeats.
void check_bench_settings(const BenchSettings& settings, int64_t pixel_multiple);

// Loads req's model and times its stages as `settings` asks: the results object `autooptim bench` prints
// (model, device, shape, text_encoding, transformer_forward, denoising_step, vae_decode_*, profile, ...).
nlohmann::json run_benchmark(const LoadRequest& req, const BenchSettings& settings, const BenchReporter& reporter);

}  // namespace autooptim::runtime
