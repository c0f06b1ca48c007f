#pragma once
// A worker holds one loaded model and runs manifests on prompts: the model is loaded once per
// process and every trial only switches the runtime options. Each run is timed with a full device
// synchronisation around generate() (warm-up is the caller's business), its output buffer is poisoned
// (NaN) before the run, and the engagement trace is collected.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>

#include "gates/manifest.h"
#include "gates/prompts.h"
#include "runtime/models.h"

namespace autooptim::gates {

struct RunOutput {
  at::Tensor video;  // [T, 3, H, W] float32 in [0, 1] (NaN where the run wrote nothing)
  double seconds = 0;
  runtime::Trace trace;
  runtime::StageTimes times;
  std::string error;  // non-empty when the run failed (NaN, out of memory, a technique error)
};

class Worker {
 public:
  // Loads the model named by the request (weights, device, dtype).
  explicit Worker(const runtime::LoadRequest& request);

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

  // One generation of `prompt` under `m`'s flags and config, timed around the whole generate().
  RunOutput run(const Manifest& m, const Prompt& prompt);

  // Dense matmul rate in the compute dtype, measured once: the ceiling for the FLOP floor.
  double peak_tflops();
  // A stable identity of this binary (sha256 of the executable), for caches and the ledger.
  static const std::string& build_id();
  // What run() has done so far: generations and the seconds spent inside them (device time generating).
  int64_t generations() const { return generations_; }
  double generating_seconds() const { return generating_s_; }

 private:
  runtime::LoadRequest request_;
  runtime::LoadedModel loaded_;
  std::map<at::ScalarType, runtime::LoadedModel> other_precisions_;
  double peak_tflops_ = 0;
  int64_t generations_ = 0;
  double generating_s_ = 0;
};

}  // namespace autooptim::gates
