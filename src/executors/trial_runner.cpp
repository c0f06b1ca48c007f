#include "executors/trial_runner.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>

#include "gates/generate_params.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/stats.h"
#include "runtime/techniques/engagement.h"

namespace autooptim::executors {

nlohmann::json Trial::to_json() const {
  return {{"label", label}, {"flags", flags}, {"prompts", prompts}, {"baseline_s", baseline_s},
          {"candidate_s", candidate_s}, {"speedup", speedup}, {"psnr_min", psnr_min}, {"not_engaged", not_engaged},
          {"skip_ratio", skip_ratio < 0 ? nlohmann::json(nullptr) : nlohmann::json(skip_ratio)},
          {"density", density < 0 ? nlohmann::json(nullptr) : nlohmann::json(density)}};
}

double clip_psnr(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor qa = (a * 255.0).round(), qb = (b * 255.0).round();
  const double mse = (qa - qb).pow(2).mean().item<double>();
  if (!std::isfinite(mse)) return 0.0;
  if (mse <= 0) return 100.0;
  return std::min(100.0, 10.0 * std::log10(255.0 * 255.0 / mse));
}

namespace {

// Holds an exclusive flock on a file for its lifetime (nothing when the path is empty).
class DeviceLock {
 public:
  explicit DeviceLock(const std::string& path) {
    if (path.empty()) return;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("executor: cannot open the device lock " + path);
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) throw Error("executor: cannot take the device lock " + path);
  }
  ~DeviceLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  DeviceLock(const DeviceLock&) = delete;
  DeviceLock& operator=(const DeviceLock&) = delete;

 private:
  int fd_ = -1;
};

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the stop flag is set from a signal handler");
}  // namespace

void TrialRunner::request_stop() { g_stop.store(true); }
bool TrialRunner::stop_requested() { return g_stop.load(); }

TrialRunner::TrialRunner(const ExecutorRequest& req, const gates::Manifest& base, std::vector<gates::Prompt> prompts)
    : req_(req), base_(base), prompts_(std::move(prompts)) {
  if (prompts_.empty()) throw Error("executor: no prompts to explore on");
  loaded_ = runtime::load_model(req.load);
  double s = 0;
  const DeviceLock lock(req_.device_lock);  // the warm-up is as heavy as a timed run
  generate(gates::to_runtime_options(base_), prompts_[0], &s);  // warm-up, untimed
}

at::Tensor TrialRunner::generate(const runtime::RuntimeOptions& o, const gates::Prompt& p, double* seconds,
                                 runtime::Trace* trace) {
  auto& pipe = *loaded_.pipeline;
  pipe.set_options(o);
  const runtime::GenerateParams g = gates::generate_params(base_.config, p.text);
  const auto dev = pipe.precision().device;
  runtime::device_synchronize(dev);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = pipe.generate(g);
  *seconds = runtime::synced_seconds_since(t0, dev);
  if (trace) *trace = r.trace;
  return r.video;
}

runtime::RuntimeOptions TrialRunner::options_of(const nlohmann::json& flags, const std::string& label) const {
  gates::Manifest m = base_;
  m.id = base_.model + "/trial";
  m.family = "composite";
  m.kind = "patch";
  m.flags = flags;
  m.base = base_.id;
  return gates::to_runtime_options(gates::parse_manifest(gates::to_json(m), "trial " + label));
}

std::vector<runtime::Trace> TrialRunner::traces(const nlohmann::json& flags, const std::string& label, int64_t n) {
  const auto opts = options_of(flags, label);
  std::vector<runtime::Trace> out;
  n = std::min<int64_t>(n, static_cast<int64_t>(prompts_.size()));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    runtime::Trace trace;
    const DeviceLock lock(req_.device_lock);
    generate(opts, prompts_[static_cast<size_t>(i)], &s, &trace);
    out.push_back(trace);
  }
  return out;
}

Trial TrialRunner::measure(const nlohmann::json& flags, const std::string& label, int64_t n) {
  ++trials_;
  const auto opts = options_of(flags, label);
  const auto base_opts = gates::to_runtime_options(base_);
  Trial t;
  t.flags = flags;
  t.label = label;
  n = std::min<int64_t>(n, static_cast<int64_t>(prompts_.size()));
  std::vector<double> bt, ct;
  double worst = 100.0;
  double skip_sum = 0, density_sum = 0;
  int64_t skip_runs = 0, density_runs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = prompts_[static_cast<size_t>(i)];
    double s = 0;
    runtime::Trace trace;
    at::Tensor c;
    {
      const DeviceLock lock(req_.device_lock);  // no other executor times while this pair runs
      baseline_clips_[p.id] = generate(base_opts, p, &s);  // interleaved: baseline then candidate
      bt.push_back(s);
      c = generate(opts, p, &s, &trace);
      ct.push_back(s);
    }
    for (const auto& problem : runtime::engagement_problems(opts, trace))
      if (std::find(t.not_engaged.begin(), t.not_engaged.end(), problem) == t.not_engaged.end()) t.not_engaged.push_back(problem);
    worst = std::min(worst, clip_psnr(c, baseline_clips_.at(p.id)));
    if (trace.has("cache.skip_ratio")) skip_sum += trace.get("cache.skip_ratio"), ++skip_runs;
    if (trace.has("sparse.attention.density")) density_sum += trace.get("sparse.attention.density"), ++density_runs;
  }
  if (skip_runs) t.skip_ratio = skip_sum / skip_runs;
  if (density_runs) t.density = density_sum / density_runs;
  t.prompts = n;
  t.baseline_s = runtime::TimingStats::of(bt).median;
  t.candidate_s = runtime::TimingStats::of(ct).median;
  t.speedup = t.candidate_s > 0 ? t.baseline_s / t.candidate_s : 0.0;
  t.psnr_min = worst;
  return t;
}

}  // namespace autooptim::executors
