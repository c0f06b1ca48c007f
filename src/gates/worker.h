#pragma once
// A worker holds one loaded model and runs manifests on prompts: the model is loaded once per
// process and every trial only switches the runtime options. Each run is timed with a full device
// synchronisation around generate() (warm-up is the caller's business), its output buffer is poisoned
// (NaN) before the run, and the engagement trace is collected.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gates/manifest.h"
#include "gates/prompts.h"
#include "runtime/models.h"

namespace autooptim::redteam {
class RedTeam;
}

namespace autooptim::gates {

struct RunOutput {
  at::Tensor video;  // [T, 3, H, W] float32 in [0, 1] (NaN where the run wrote nothing)
  double seconds = 0;
  runtime::Trace trace;
  runtime::StageTimes times;
  std::string error;  // non-empty when the run failed (NaN, out of memory, a technique error)
  Prompt prompt;      // what was asked for: the prompt and the seed
  int64_t seed = 0;
  // Seconds the device synchronisation before the timer took: device work still queued from outside
  // the timed window (0 on the CPU).
  double pre_sync_s = 0;
  // The output buffer still held NaN when generate() returned and the timer stopped: whatever wrote it
  // later did so outside the timed window (checked at once, not after the gate's other runs).
  bool unwritten_at_return = false;
};

// The machine's throughput at the model's shapes, measured in this process: the reference that the
// baseline's stage times are held against (docs/gate-defences.md, "a slowed baseline").
struct Calibration {
  double matmul_tflops = 0;     // [tokens, dim] x [dim, dim] in the compute dtype, per second
  double attention_tflops = 0;  // self-attention over the model's tokens, heads and head size, per second
  // The same per second of the process's CPU time (all its threads): on a CPU shared with other
  // processes, what a CPU-second buys, which their load does not change (the wall clock's rate it does).
  double matmul_tflops_per_cpu_s = 0, attention_tflops_per_cpu_s = 0;
  double seconds = 0;  // what the calibration cost
  int64_t tokens = 0, dim = 0, heads = 0;
};

// What a direct generation (`generate`) may add to a manifest's run; the gate never sets any of it, and
// with none set a run is exactly the gate's.
struct RunExtras {
  std::string negative_prompt;      // diffusers' default, and the gate's: empty
  std::optional<at::Tensor> image;  // first frame, [3, H, W] in [0, 1] (any size)
  runtime::StepCallback on_step;    // per denoising step: progress
};

class Worker {
 public:
  // Loads the model named by the request (weights, device, dtype).
  explicit Worker(const runtime::LoadRequest& request);
  ~Worker();  // the red team's interceptors (their threads) go before the pipelines they watch

  const std::string& model() const { return request_.model; }
  const runtime::LoadRequest& request() const { return request_; }
  // The model in the request's dtype (what baselines run in).
  runtime::WanPipeline& pipeline() { return *loaded_.pipeline; }
  // The model in the compute dtype a manifest asks for: a second copy is loaded once when a control
  // runs in another precision (the fp32 control on a GPU, fp64 on the CPU).
  runtime::WanPipeline& pipeline_for(const std::string& dtype);
  double load_seconds() const { return loaded_.load_seconds; }
  const std::string& weights_label() const { return loaded_.weights_label; }
  at::Device device() const { return request_.precision.device; }

  // One generation of `prompt` under `m`'s flags and config (the seed: `seed`, else the config's),
  // timed around the whole generate().
  // `generate` runs through here too, so a manifest's clip is the same wherever it is made (docs/deploy.md).
  RunOutput run(const Manifest& m, const Prompt& prompt, std::optional<int64_t> seed = std::nullopt,
                const RunExtras& extras = {});
  // One timed generation whose prompt (one of `choices`) and seed are drawn from std::random_device
  // after the timer has started: nothing before the timed window can know what it will be asked.
  RunOutput run_drawn(const Manifest& m, const std::vector<Prompt>& choices);

  // Dense matmul and attention rates at the shapes of one forward of `config`, in the compute dtype of
  // the request: the best of a few short rounds.
  Calibration calibrate(const RunConfig& config);
  // A fingerprint of the loaded weights (every transformer and VAE tensor's name, shape, dtype, sums
  // and a strided sample, and a text embedding): what the baseline cache and the records are keyed by.
  const std::string& weights_hash();

  // Dense matmul rate in the compute dtype, measured once: the ceiling for the FLOP floor.
  double peak_tflops();
  // A stable identity of this binary (sha256 of the executable), for caches and the ledger.
  static const std::string& build_id();
  // Red-team switches (the harness's own tests, `gate --allow-redteam`): refused unless allowed. Allowed, every
  // pipeline of this worker runs behind the red team's interceptor (redteam/redteam.h), which acts on the
  // switches of each manifest run; disallowed again, the interceptors and all they remembered are gone.
  void allow_redteam(bool allowed);
  bool redteam_allowed() const { return redteam_allowed_; }
  // How a manifest meant for this worker is parsed: red-team flags accepted exactly when it allows them.
  ParseOptions parse_options() const;
  // What run() has done so far: generations and the seconds spent inside them (device time generating).
  int64_t generations() const { return generations_; }
  double generating_seconds() const { return generating_s_; }
  // The cached baseline clips this process has held against a fresh baseline run of its own (or written
  // from one): each file with the digest of its bytes then. A file changed since is not verified.
  bool baseline_clip_verified(const std::string& file, const std::string& digest) const;
  void mark_baseline_clip_verified(const std::string& file, const std::string& digest);
  // The seconds of the baseline's timed runs in this process's gates, by the baseline manifest's hash (the
  // newest kBaselineRunsKept): the machine's noise an earlier gate measured (GateSettings::pairs_from_history).
  static constexpr size_t kBaselineRunsKept = 8;
  const std::vector<double>& baseline_run_seconds(const std::string& baseline_hash) const;
  void record_baseline_run(const std::string& baseline_hash, double seconds);

 private:
  runtime::LoadRequest request_;
  runtime::LoadedModel loaded_;
  std::map<at::ScalarType, runtime::LoadedModel> other_precisions_;
  double peak_tflops_ = 0;
  int64_t generations_ = 0;
  double generating_s_ = 0;
  std::string weights_hash_;
  std::map<std::string, std::string> verified_baseline_clips_;  // file -> digest
  std::map<std::string, std::vector<double>> baseline_runs_;    // baseline hash -> seconds, oldest first
  bool redteam_allowed_ = false;
  // One red team per pipeline (per precision), declared after the pipelines so it is destroyed first.
  std::map<runtime::WanPipeline*, std::unique_ptr<redteam::RedTeam>> redteams_;
  // The red team of `pipe`, armed with `m`'s switches, when red-team flags are allowed.
  void arm_redteam(runtime::WanPipeline& pipe, const Manifest& m);
  RunOutput run_with(const Manifest& m, const std::vector<Prompt>& choices, std::optional<int64_t> seed, bool drawn,
                     const RunExtras& extras = {});
};

}  // namespace autooptim::gates
