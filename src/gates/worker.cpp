#include "gates/worker.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "gates/generate_params.h"
#include "gates/sha256.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace autooptim::gates {

Worker::Worker(const runtime::LoadRequest& request) : request_(request) { loaded_ = runtime::load_model(request_); }

const std::string& Worker::build_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/self/exe", std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return sha256_hex(s.str()).substr(0, 16);
  }();
  return id;
}

double Worker::peak_tflops() {
  if (peak_tflops_ > 0) return peak_tflops_;
  const auto& p = request_.precision;
  const int64_t n = p.device.is_cuda() ? 8192 : 1024;
  at::InferenceMode guard;
  const at::Tensor a = at::randn({n, n}, p.compute_opts()), b = at::randn({n, n}, p.compute_opts());
  at::mm(a, b);
  runtime::DeviceTimer timer(p.device);
  const int reps = p.device.is_cuda() ? 20 : 4;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    timer.start();
    for (int i = 0; i < reps; ++i) at::mm(a, b);
    const double s = timer.stop_seconds();
    best = std::max(best, 2.0 * n * n * n * reps / s / 1e12);
  }
  peak_tflops_ = best;
  return best;
}

runtime::WanPipeline& Worker::pipeline_for(const std::string& dtype) {
  const at::ScalarType want = runtime::compute_dtype(dtype, device());
  if (want == request_.precision.compute) return pipeline();
  auto it = other_precisions_.find(want);
  if (it == other_precisions_.end()) {
    runtime::LoadRequest r = request_;
    r.precision.compute = want;
    it = other_precisions_.emplace(want, runtime::load_model(r)).first;
  }
  return *it->second.pipeline;
}

RunOutput Worker::run(const Manifest& m, const Prompt& prompt) {
  if (m.model != request_.model)
    throw Error("manifest '" + m.id + "' is for model '" + m.model + "', this worker runs '" + request_.model + "'");
  RunOutput out;
  const runtime::RuntimeOptions opts = to_runtime_options(m);
  auto& pipe = pipeline_for(opts.dtype);
  pipe.set_options(opts);

  const runtime::GenerateParams p = generate_params(m.config, prompt.text);
  // Poison: the output buffer starts as NaN, so a run that does not write its output fails.
  const int64_t T = m.config.frames;
  out.video = at::full({T, 3, m.config.height, m.config.width}, std::numeric_limits<float>::quiet_NaN());
  try {
    runtime::device_synchronize(device());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = pipe.generate(p, {}, &out.video);
    out.seconds = runtime::synced_seconds_since(t0, device());
    ++generations_;
    generating_s_ += out.seconds;
    out.trace = r.trace;
    out.times = r.times;
  } catch (const NumericError& e) {
    out.error = e.what();
  } catch (const c10::Error& e) {
    out.error = std::string("libtorch: ") + e.what_without_backtrace();
  }
  return out;
}

}  // namespace autooptim::gates
