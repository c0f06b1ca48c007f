#include "workers/server.h"
#include "base/utc_time.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "workers/trial_baselines.h"
#include "workers/trial_result.h"
#include "base/atomic_file.h"
#include "gates/gate.h"
#include "gates/gate_run.h"
#include "gates/generate_params.h"
#include "gates/ledger.h"
#include "gates/metrics.h"
#include "base/sha256.h"
#include "runtime/device.h"
#include "runtime/extension_points.h"
#include "runtime/video_io.h"
#include "base/error.h"
#include "base/process_identity.h"
#include "base/stop_signals.h"
#include "runtime/forward_context.h"
#include "base/stats.h"
#include "runtime/techniques/engagement.h"
#include "runtime/techniques/registry.h"
#include "gates/sandboxed_worker.h"
#include "workers/messages.h"
#include "workers/plugin_trial_worker.h"
#include "workers/protocol.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace autooptim::workers {

using base::host_name;
namespace {

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

// SIGTERM and SIGINT set g_signal (told_to_stop). They are unblocked: a worker spawned by the orchestrator
// starts with them blocked (base/spawn.cpp).
struct Abandon : std::exception {
  bool requeue;  // true: put the request back (we are leaving); false: it was cancelled
  explicit Abandon(bool r) : requeue(r) {}
  const char* what() const noexcept override { return requeue ? "worker leaving" : "cancelled"; }
};

long max_rss_kb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// The identity of the weights for caches: the checkpoint folder's files (path, size, mtime) and the
// first MiB of each, hashed; for synthetic weights the model name (they are made from a fixed seed).
std::string weights_identity(const runtime::LoadRequest& r) {
  if (r.weights_dir.empty()) return "synthetic-" + r.model;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(r.weights_dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string acc;
  for (const auto& f : files) {
    acc += fs::relative(f, r.weights_dir).string() + ":" + std::to_string(fs::file_size(f)) + "\n";
    std::ifstream in(f, std::ios::binary);
    std::string head(1 << 20, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    acc += gates::sha256_hex(head) + "\n";
  }
  return gates::sha256_hex(acc).substr(0, 16);
}

class Server {
 public:
  explicit Server(const ServeOptions& o)
      : o_(o),
        layout_{o.run_dir},
        dir_(layout_.worker(o.worker_id)),
        trial_baselines_(reuse_trial_baselines(o.trial_baselines, o.load.precision.device)) {}

  int run();

 private:
  // --- registration and heartbeat
  void write_registration(const std::string& state, const std::string& error = "");
  void heartbeat_loop();
  json counters();
  bool told_to_stop() const {
    return g_signal.load() != 0 || fs::exists(layout_.stop_all()) || fs::exists(dir_ / "stop") ||
           fs::exists(dir_ / "dead");
  }
  void check_abandon(const std::string& id) {
    if (g_signal.load() != 0 || fs::exists(dir_ / "dead")) throw Abandon(true);
    if (fs::exists(fs::path(layout_.cancel()) / id)) throw Abandon(false);
  }
  void set_stage(const std::string& s) {
    std::lock_guard<std::mutex> l(mu_);
    stage_ = s;
  }

  // --- run's steps
  void take_over_folder();
  void register_loading();
  void load_model();
  void serve_queue();

  // --- requests
  void serve_one(const fs::path& claimed, const std::string& name);
  json handle(const json& req);
  json do_trial(const TrialRequest& req, const std::string& id);
  json do_traces(const TrialRequest& req, const std::string& id);
  json do_gate(const GateRequest& req, const std::string& id);
  ScreenResult do_screen(const ScreenRequest& req, const std::string& id);
  CalibrateResult do_calibrate(const CalibrateRequest& req, const std::string& id);

  // Stage timing helpers (as `autooptim bench` times them).
  struct Shape {
    at::Tensor x, t, ctx;
    int64_t latent_frames = 0, h = 0, w = 0;
  };
  Shape shape_for(const gates::Manifest& base);
  double time_forwards(const gates::Manifest& m, const Shape& s, int64_t k, int64_t step, const std::string& id);
  double time_decode(const gates::Manifest& m, const Shape& s);
  double time_text(const gates::Manifest& m);
  void warm(const gates::Manifest& base, const gates::Prompt& p);

  ServeOptions o_;
  Layout layout_;
  fs::path dir_;
  std::unique_ptr<gates::Worker> worker_;
  json registration_;
  std::mutex mu_;
  std::string current_, stage_, state_ = "loading";
  std::atomic<bool> quit_{false}, loaded_{false};
  double snap_gen_s_ = 0;  // generating seconds and generations at the last request's end (under mu_)
  int64_t snap_gens_ = 0;
  const Clock::time_point born_ = Clock::now();
  double busy_s_ = 0, extra_generating_s_ = 0, load_s_ = 0;
  int64_t requests_ = 0, extra_generations_ = 0;
  int64_t heartbeat_seq_ = 0;
  std::set<std::string> warmed_;
  std::map<std::string, CalibrateResult> calibrations_;  // base manifest hash -> calibrate result
  TrialBaselines trial_baselines_;
  PluginTrialWorker plugin_trials_;  // the candidate's side of trials of a plugin's manifest
};

json Server::counters() {
  std::lock_guard<std::mutex> l(mu_);
  const double gen = snap_gen_s_;
  const int64_t gens = snap_gens_;
  const at::Device dev = o_.load.precision.device;
  json j = {{"seq", ++heartbeat_seq_},
            {"state", state_},
            {"request", current_.empty() ? json() : json(current_)},
            {"stage", stage_},
            {"busy_s", busy_s_},
            {"generating_s", gen},
            {"generations", gens},
            {"requests", requests_},
            {"held_s", std::chrono::duration<double>(Clock::now() - born_).count()},
            {"load_s", load_s_},
            {"peak_rss_kb", max_rss_kb()},
            {"peak_device_bytes", dev.is_cuda() && loaded_.load() ? runtime::peak_memory_bytes(dev) : 0},
            {"time", base::utc_timestamp()}};
  return j;
}

void Server::write_registration(const std::string& state, const std::string& error) {
  {
    std::lock_guard<std::mutex> l(mu_);
    state_ = state;
  }
  registration_["state"] = state;
  if (!error.empty()) registration_["error"] = error;
  registration_["updated"] = base::utc_timestamp();
  if (state == "stopped" || state == "failed") registration_["final"] = counters();
  gates::write_file_atomic((dir_ / "worker.json").string(), registration_.dump(2) + "\n");
}

void Server::heartbeat_loop() {
  while (!quit_.load()) {
    try {
      gates::write_file_atomic((dir_ / "heartbeat.json").string(), counters().dump() + "\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker %s: heartbeat: %s\n", o_.worker_id.c_str(), e.what());
    }
    for (int i = 0; i < 20 && !quit_.load(); ++i)
      std::this_thread::sleep_for(std::chrono::duration<double>(o_.heartbeat_s / 20));
  }
}

int Server::run() {
  if (!valid_id(o_.worker_id))
    throw Error("--worker-id '" + o_.worker_id + "': use 1-64 letters, digits, '-', '_' or '.'");
  take_over_folder();
  base::catch_stop_signals(on_signal, /*once=*/false);  // not reset: the worker leaves at its next check
  if (o_.threads > 0) at::set_num_threads(static_cast<int>(o_.threads));
  register_loading();
  std::thread hb([this] { heartbeat_loop(); });
  struct Join {
    std::thread& t;
    std::atomic<bool>& q;
    ~Join() {
      q.store(true);
      if (t.joinable()) t.join();
    }
  } join{hb, quit_};
  load_model();
  serve_queue();
  if (fs::exists(dir_ / "dead")) {
    std::fprintf(stderr, "worker %s: declared dead by a janitor; leaving\n", o_.worker_id.c_str());
    return 1;
  }
  write_registration("stopped");
  std::fprintf(stderr, "worker %s: stopped after %lld requests\n", o_.worker_id.c_str(),
               static_cast<long long>(requests_));
  return 0;
}

// The worker's folder under the run: refused when a live worker of this host holds the id; a dead
// predecessor's claimed requests go back to the queue.
void Server::take_over_folder() {
  fs::create_directories(dir_);
  for (const auto& d : {layout_.queue(), layout_.responses(), layout_.cancel()}) fs::create_directories(d);
  // An id held by a live worker of this host is refused; a dead predecessor's claims are queued again.
  if (auto prev = read_json_file((dir_ / "worker.json").string())) {
    const std::string st = prev->value("state", "");
    const int64_t pid = prev->value("pid", int64_t{0});
    if ((st == "loading" || st == "ready") && !fs::exists(dir_ / "dead") && prev->value("host", "") == host_name() &&
        pid > 0 && pid != getpid() && ::kill(static_cast<pid_t>(pid), 0) == 0)
      throw Error("--worker-id " + o_.worker_id + " is taken by a live worker (pid " + std::to_string(pid) + ") in " +
                  o_.run_dir);
  }
  std::error_code ec;
  if (fs::is_directory(dir_ / "claimed", ec))
    for (const auto& e : fs::directory_iterator(dir_ / "claimed", ec)) {
      auto req = read_json_file(e.path().string());
      if (req) {
        (*req)["attempt"] = req->value("attempt", 0) + 1;
        gates::write_file_atomic((fs::path(layout_.queue()) / e.path().filename()).string(), req->dump() + "\n");
      }
      fs::remove(e.path(), ec);
    }
  fs::remove(dir_ / "dead", ec);
  fs::remove(dir_ / "stop", ec);
  fs::create_directories(dir_ / "claimed");
}

// The registration written while the model loads: who, where, which model and device.
void Server::register_loading() {
  const bool cuda = o_.load.precision.device.is_cuda();
  registration_ = {
      {"protocol", kProtocolVersion},
      {"id", o_.worker_id},
      {"host", host_name()},
      {"pid", static_cast<int64_t>(getpid())},
      {"model", o_.load.model},
      {"weights", o_.load.weights_dir.empty() ? "synthetic" : fs::absolute(o_.load.weights_dir).string()},
      // The folder itself (the label above is replaced at load): a sandboxed process given these weights binds it.
      {"weights_dir", o_.load.weights_dir.empty() ? "" : fs::absolute(o_.load.weights_dir).string()},
      {"device", cuda ? "cuda" : "cpu"},
      {"cuda_visible_devices", std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : ""},
      {"threads", at::get_num_threads()},
      {"build", gates::Worker::build_id()},
      {"started", base::utc_timestamp()}};
  write_registration("loading");
}

// Loads the model, then registers the worker as ready with what the gate keys its verdicts by; a failure is
// registered before it is rethrown.
void Server::load_model() {
  try {
    registration_["weights_id"] = weights_identity(o_.load);
    const auto t0 = Clock::now();
    worker_ = std::make_unique<gates::Worker>(o_.load);
    {
      std::lock_guard<std::mutex> l(mu_);
      load_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    registration_["weights"] = worker_->weights_label();
    registration_["device_name"] = runtime::device_name(worker_->device());
    registration_["load_s"] = load_s_;
    registration_["dtype"] = o_.load.options.dtype;
    // What the gate keys verdicts and the baseline cache by (build, weights hash, device, dtype): the
    // orchestrator matches resumed ledger rows against it without a model of its own.
    registration_["gate_environment"] = gates::gate_environment(*worker_);
    loaded_.store(true);
  } catch (const std::exception& e) {
    write_registration("failed", e.what());
    throw;
  }
  write_registration("ready");
  std::fprintf(stderr, "worker %s: %s loaded in %.1f s on %s; serving %s\n", o_.worker_id.c_str(),
               o_.load.model.c_str(), load_s_, registration_.value("device_name", "").c_str(), o_.run_dir.c_str());
  std::fflush(stderr);
}

// Serves the queue, oldest request first, until told to stop, --max-requests, or --idle-exit.
void Server::serve_queue() {
  std::error_code ec;
  auto idle_since = Clock::now();
  while (!told_to_stop()) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(layout_.queue(), ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind(".tmp", 0) != 0 && n.size() > 5 && n.substr(n.size() - 5) == ".json") names.push_back(n);
    }
    std::sort(names.begin(), names.end());
    bool served = false;
    for (const auto& n : names) {
      const fs::path q = fs::path(layout_.queue()) / n;
      auto req = read_json_file(q.string());
      if (!req) continue;  // claimed by another worker meanwhile
      if (req->contains("worker") && req->value("worker", "") != o_.worker_id) continue;
      const fs::path claimed = dir_ / "claimed" / n;
      if (::rename(q.c_str(), claimed.c_str()) != 0) continue;  // another worker won it
      serve_one(claimed, n);
      served = true;
      idle_since = Clock::now();
      break;  // re-read the queue: FIFO across clients
    }
    if (o_.max_requests > 0 && requests_ >= o_.max_requests) break;
    if (!served) {
      if (o_.idle_exit_s > 0 && std::chrono::duration<double>(Clock::now() - idle_since).count() > o_.idle_exit_s)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

void Server::serve_one(const fs::path& claimed, const std::string& name) {
  auto req = read_json_file(claimed.string());
  if (!req) {
    std::error_code ec;
    fs::remove(claimed, ec);
    return;
  }
  const std::string id = req->value("id", name);
  {
    std::lock_guard<std::mutex> l(mu_);
    current_ = id;
    stage_ = req->value("kind", "");
  }
  const auto t0 = Clock::now();
  const double gen0 = worker_->generating_seconds() + extra_generating_s_;
  const int64_t gens0 = worker_->generations() + extra_generations_;
  Response resp;
  resp.id = id;
  resp.kind = req->value("kind", "");
  resp.worker = o_.worker_id;
  resp.attempt = req->value("attempt", 0);
  bool requeue = false;
  try {
    resp.result = handle(*req);
    resp.ok = true;
  } catch (const Abandon& a) {
    if (a.requeue)
      requeue = true;
    else {
      resp.cancelled = true;
      resp.error = "cancelled by its client";
    }
  } catch (const c10::Error& e) {
    resp.error = std::string("libtorch: ") + e.what_without_backtrace();
  } catch (const std::exception& e) {
    resp.error = e.what();
  }
  const double busy = std::chrono::duration<double>(Clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> l(mu_);
    busy_s_ += busy;
    ++requests_;
    snap_gen_s_ = worker_->generating_seconds() + extra_generating_s_;
    snap_gens_ = worker_->generations() + extra_generations_;
    current_.clear();
    stage_.clear();
  }
  std::error_code ec;
  if (requeue) {
    // Leaving (signal, or declared dead): the request goes back for another worker, unanswered.
    if (!fs::exists(dir_ / "dead")) {
      gates::write_file_atomic((fs::path(layout_.queue()) / name).string(), req->dump() + "\n");
      // Said in the worker's log: a launcher or an operator sees which request another worker will finish.
      std::fprintf(stderr, "worker %s: leaving: request %s put back in the queue\n", o_.worker_id.c_str(), id.c_str());
    }
    fs::remove(claimed, ec);
    return;
  }
  resp.counters = Response::Counters{busy, worker_->generating_seconds() + extra_generating_s_ - gen0,
                                     worker_->generations() + extra_generations_ - gens0, max_rss_kb()};
  resp.finished = base::utc_timestamp();
  gates::write_file_atomic((fs::path(layout_.responses()) / (id + ".json")).string(), resp.to_json().dump() + "\n");
  fs::remove(claimed, ec);
  fs::remove(fs::path(layout_.cancel()) / id, ec);
}

json Server::handle(const json& req) {
  const std::string kind = req.value("kind", "");
  if (req.contains("model") && req.value("model", "") != o_.load.model)
    throw Error("request for model '" + req.value("model", "") + "', this worker serves '" + o_.load.model + "'");
  const std::string id = req.value("id", "");
  if (kind == "trial") return do_trial(TrialRequest::from_json(req), id);
  if (kind == "traces") return do_traces(TrialRequest::from_json(req), id);
  if (kind == "gate") {
    // The plugin the manifest pins is described here first (its flags are unknown otherwise), never loaded.
    if (const PluginRef p = PluginRef::of_request(req, "gate request"); !p.empty())
      gates::ensure_plugin_described(p.file, p.without_sandbox);
    return do_gate(GateRequest::from_json(req), id);
  }
  if (kind == "screen") return do_screen(ScreenRequest::from_json(req), id).to_json();
  if (kind == "calibrate") return do_calibrate(CalibrateRequest::from_json(req), id).to_json();
  if (kind == "ping") return {{"pong", true}};
  throw Error("unknown request kind '" + kind + "' (trial, traces, screen, calibrate, gate)");
}

// A trial request's prompts: visible ones only, at least one.
const std::vector<gates::Prompt>& checked_prompts(const TrialRequest& req) {
  for (const auto& p : req.prompts)
    for (const auto& sp : p.splits)
      if (sp.rfind("heldout", 0) == 0)
        throw Error("trial requests take visible prompts only (" + p.id + " is held out)");
  if (req.prompts.empty()) throw Error("request without prompts");
  return req.prompts;
}

// How long a plugin's trial generation may take: ten times the baseline's of the same prompt, at least a minute
// (a plugin that hangs costs the trial that much, and its worker is killed).
double plugin_run_timeout_s(double baseline_s) { return std::max(60.0, 10.0 * baseline_s); }

// The prompts a trial runs on: the first n, at least one.
int64_t prompt_count(const TrialRequest& req) {
  return std::min<int64_t>(std::max<int64_t>(1, req.n), static_cast<int64_t>(req.prompts.size()));
}

// PSNR (dB, 8-bit peak) between two clips in [0, 1]; 100 for identical: a trial's quality.
double clip_psnr(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor qa = (a * 255.0).round(), qb = (b * 255.0).round();
  const double mse = (qa - qb).pow(2).mean().item<double>();
  if (!std::isfinite(mse)) return 0.0;
  if (mse <= 0) return 100.0;
  return std::min(100.0, 10.0 * std::log10(255.0 * 255.0 / mse));
}

// The trial's candidate: the base with these flags (as the executors' TrialRunner built it), pinning `plugin`.
gates::Manifest trial_manifest(const gates::Manifest& base, const json& flags, const std::string& label,
                               const std::string& plugin = "") {
  gates::Manifest m = base;
  m.plugin = plugin;
  m.id = base.model + "/trial";
  m.family = "composite";
  m.kind = "patch";
  m.flags = flags;
  m.base = base.id;
  if (gates::technique_flags_set(m).empty()) m.kind = "control", m.family = "none";  // a trial of no technique
  return gates::parse_manifest(gates::to_json(m), "trial " + label);
}

void Server::warm(const gates::Manifest& base, const gates::Prompt& p) {
  const std::string h = gates::manifest_hash(base);
  if (warmed_.count(h)) return;
  set_stage("warm-up");
  // Untimed: allocator and kernel selection, at the shape, with as few steps as the gate's warm-up.
  worker_->run(gates::warmup_manifest(base, gates::GateSettings{}.warmup_steps), p);
  warmed_.insert(h);
}

json Server::do_trial(const TrialRequest& req, const std::string& id) {
  const gates::Manifest& base = req.base;
  const auto& prompts = checked_prompts(req);
  const std::string& label = req.label;
  const json& flags = req.flags;
  // A plugin's flags: described here, run in its sandboxed worker (the plugin never runs in this process).
  const std::string pin =
      req.plugin.empty() ? "" : gates::ensure_plugin_described(req.plugin.file, req.plugin.without_sandbox);
  const gates::Manifest cand = trial_manifest(base, flags, label, pin);
  const auto opts = gates::to_runtime_options(cand);
  warm(base, prompts[0]);
  TrialResult t;
  t.flags = flags;
  t.label = label;
  const int64_t n = prompt_count(req);
  std::vector<double> bt, ct;
  double worst = 100.0, worst_ssim = 1.0, skip_sum = 0, density_sum = 0;
  int64_t skip_runs = 0, density_runs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = prompts[static_cast<size_t>(i)];
    check_abandon(id);
    gates::RunOutput b;  // interleaved: baseline then candidate (the baseline's kept run where reused)
    if (const auto kept = trial_baselines_.find(base, p)) {
      b.video = TrialBaselines::video(*kept);
      b.seconds = kept->seconds;
      ++t.baselines_reused;
    } else {
      set_stage("trial " + label + ": baseline " + p.id);
      b = worker_->run(base, p);
      if (!b.error.empty()) throw Error("the baseline failed: " + b.error);
      trial_baselines_.keep(base, p, b.video, b.seconds);
      // A baseline run of this process: the noise a later gate here may rest on (GateSettings::pairs_from_history).
      worker_->record_baseline_run(gates::manifest_hash(base), b.seconds);
    }
    bt.push_back(b.seconds);
    check_abandon(id);
    set_stage("trial " + label + ": candidate " + p.id);
    const gates::RunOutput c =
        pin.empty() ? worker_->run(cand, p)
                    : plugin_trials_.side(req.plugin, pin, worker_->request(), plugin_run_timeout_s(b.seconds), cand, p)
                          .run(cand, p, std::nullopt);
    if (!c.error.empty()) throw Error("trial " + label + ": " + c.error);
    ct.push_back(c.seconds);
    for (const auto& problem : runtime::engagement_problems(opts, c.trace))
      if (std::find(t.not_engaged.begin(), t.not_engaged.end(), problem) == t.not_engaged.end())
        t.not_engaged.push_back(problem);
    worst = std::min(worst, clip_psnr(c.video, b.video));
    worst_ssim = std::min(
        worst_ssim,
        gates::compare_clips(runtime::frames_from_tensor(c.video), runtime::frames_from_tensor(b.video)).ssim_mean);
    if (c.trace.has("cache.skip_ratio")) skip_sum += c.trace.get("cache.skip_ratio"), ++skip_runs;
    if (c.trace.has("sparse.attention.density")) density_sum += c.trace.get("sparse.attention.density"), ++density_runs;
  }
  if (skip_runs) t.skip_ratio = skip_sum / skip_runs;
  if (density_runs) t.density = density_sum / density_runs;
  t.prompts = n;
  t.baseline_s = runtime::TimingStats::of(bt).median;
  t.candidate_s = runtime::TimingStats::of(ct).median;
  t.speedup = t.candidate_s > 0 ? t.baseline_s / t.candidate_s : 0.0;
  t.psnr_min = worst;
  t.ssim_min = std::isfinite(worst_ssim) ? worst_ssim : 0.0;
  return t.to_json();
}

json Server::do_traces(const TrialRequest& req, const std::string& id) {
  const gates::Manifest& base = req.base;
  const auto& prompts = checked_prompts(req);
  const std::string& label = req.label;
  const gates::Manifest cand = trial_manifest(base, req.flags, label);
  const int64_t n = prompt_count(req);
  warm(base, prompts[0]);
  json traces = json::array();
  for (int64_t i = 0; i < n; ++i) {
    check_abandon(id);
    set_stage("calibration " + label);
    const gates::RunOutput r = worker_->run(cand, prompts[static_cast<size_t>(i)]);
    if (!r.error.empty()) throw Error("calibration " + label + ": " + r.error);
    traces.push_back(r.trace.to_json());
  }
  return {{"traces", traces}};
}

json Server::do_gate(const GateRequest& req, const std::string& id) {
  const gates::Manifest& m = req.manifest;
  if (req.split.empty() || req.out_dir.empty()) throw Error("gate request without split or out_dir");
  plugin_trials_.release();  // a gate starts its own workers, fresh: the device's memory is theirs
  const json& s = req.settings;
  gates::GateSettings g = gates::settings_from_json(s);
  if (!req.plugin.empty()) {
    g.plugin_files[gates::plugin_file_sha256(req.plugin.file)] = req.plugin.file;
    g.plugin_without_sandbox = req.plugin.without_sandbox;
  }
  // The baseline is the harness's pinned one; the orchestrator sends it at the run's configuration.
  if (s.contains("baseline_manifest"))
    g.baseline_config = gates::parse_manifest(s["baseline_manifest"], "the gate request's baseline").config;
  g.progress = [this, id](const gates::GateProgress& p) {
    check_abandon(id);
    set_stage(p.stage + " (run " + std::to_string(p.run) + "/" + std::to_string(p.runs) + ")");
  };
  std::optional<gates::Ledger> ledger;
  if (req.ledger) ledger.emplace(*req.ledger);
  const gates::GateVerdict v = gates::run_gate(*worker_, m, req.split, req.out_dir, g, ledger ? &*ledger : nullptr);
  // Sent as the typed message: a verdict that does not fit it fails here, not as a silent 0 in the orchestrator.
  return GateVerdictResult::from_json(v.to_json()).to_json();
}

// --- stage timing (screen, calibrate): a transformer forward at the run's shape, a decode, the text
// encoder, each after warm-up, with a full synchronisation around the timed region.

Server::Shape Server::shape_for(const gates::Manifest& base) {
  at::InferenceMode guard;
  auto& pipe = worker_->pipeline();
  const auto& tc = pipe.transformer()->config();
  const auto& vc = pipe.vae()->config();
  Shape s;
  s.latent_frames = (base.config.frames - 1) / vc.scale_factor_temporal + 1;
  s.h = base.config.height / vc.scale_factor_spatial;
  s.w = base.config.width / vc.scale_factor_spatial;
  const int64_t L = s.latent_frames * (s.h / tc.patch_size[1]) * (s.w / tc.patch_size[2]);
  const auto dev = worker_->device();
  pipe.set_options(gates::to_runtime_options(base));
  s.ctx = pipe.encode_text({"a red fox running through fresh snow"});
  auto gen = at::detail::createCPUGenerator(0);
  s.x = at::randn({1, vc.z_dim, s.latent_frames, s.h, s.w}, gen, at::kFloat).to(dev);
  s.t = at::full({1, L}, 999.0f, at::TensorOptions().device(dev));
  return s;
}

double Server::time_forwards(const gates::Manifest& m, const Shape& s, int64_t k, int64_t step, const std::string& id) {
  const auto opts = gates::to_runtime_options(m);
  auto& pipe = worker_->pipeline_for(opts.dtype);
  pipe.set_options(opts);
  const auto dev = worker_->device();
  const at::Tensor x = s.x.to(dev, pipe.precision().compute), ctx = s.ctx.to(dev, pipe.precision().compute);
  runtime::Trace trace;
  runtime::CrossKVCache replay_kv;  // a replayed forward reads the K/V its first run cached
  const std::unique_ptr<runtime::ForwardReplay> replay = runtime::ext::make_forward_replay(opts);
  at::InferenceMode guard;
  auto one = [&] {
    runtime::CrossKVCache kv;
    runtime::ForwardContext fc;
    fc.options = &pipe.options();
    fc.trace = &trace;
    fc.cross_kv = replay ? &replay_kv : &kv;
    fc.step = step;
    fc.steps = std::max<int64_t>(step + 1, m.config.steps);
    fc.replay = replay.get();
    pipe.transformer()->forward(x, s.t, ctx, nullptr, &fc);
  };
  one();  // warm-up (captures the graph where the forward is replayed)
  if (replay) one();
  double best = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < k; ++i) {
    check_abandon(id);
    runtime::device_synchronize(dev);
    const auto t0 = Clock::now();
    one();
    const double sec = runtime::synced_seconds_since(t0, dev);
    extra_generating_s_ += sec;
    best = std::min(best, sec);
  }
  return best;
}

double Server::time_decode(const gates::Manifest& m, const Shape& s) {
  auto& pipe = worker_->pipeline_for(gates::to_runtime_options(m).dtype);
  pipe.set_options(gates::to_runtime_options(m));
  const auto dev = worker_->device();
  at::InferenceMode guard;
  runtime::device_synchronize(dev);
  const auto t0 = Clock::now();
  pipe.decode(s.x);
  const double sec = runtime::synced_seconds_since(t0, dev);
  extra_generating_s_ += sec;
  return sec;
}

double Server::time_text(const gates::Manifest& m) {
  auto& pipe = worker_->pipeline_for(gates::to_runtime_options(m).dtype);
  const auto dev = worker_->device();
  at::InferenceMode guard;
  runtime::device_synchronize(dev);
  const auto t0 = Clock::now();
  pipe.encode_text({"a red fox running through fresh snow", ""});
  const double sec = runtime::synced_seconds_since(t0, dev);
  extra_generating_s_ += sec;
  return sec;
}

CalibrateResult Server::do_calibrate(const CalibrateRequest& req, const std::string& id) {
  const gates::Manifest& base = req.base;
  const std::string h = gates::manifest_hash(base);
  if (auto it = calibrations_.find(h); it != calibrations_.end()) return it->second;
  set_stage("calibration: forward");
  const Shape s = shape_for(base);
  const double fwd = time_forwards(base, s, 1, base.config.steps / 2, id);
  set_stage("calibration: decode");
  time_decode(base, s);  // warm-up of the decoder's kernels
  const double dec = time_decode(base, s);
  const double text = time_text(base);
  const int64_t per_step = base.config.guidance > 1.0 ? 2 : 1;
  const int64_t forwards = base.config.steps * per_step;
  CalibrateResult r;
  r.text_s = text;
  r.forward_s = fwd;
  r.decode_s = dec;
  r.forwards_per_clip = forwards;
  r.clip_estimate_s = text + forwards * fwd + dec;
  r.worker_load_s = load_s_;
  r.config = gates::to_json(base.config);
  calibrations_[h] = r;
  ++extra_generations_;
  return r;
}

// Whether a manifest's techniques touch the decoder (a decode is timed then).
bool changes_decoder(const gates::Manifest& m) {
  const auto opts = gates::to_runtime_options(m);
  for (const auto& name : runtime::techniques::techniques_on(opts))
    if (const auto* t = runtime::techniques::find(name))
      for (const auto& hook : t->hooks)
        if (hook.find("vae") != std::string::npos || hook.find("decode") != std::string::npos) return true;
  return false;
}

ScreenResult Server::do_screen(const ScreenRequest& req, const std::string& id) {
  const gates::Manifest& base = req.base;
  const gates::Manifest& cand = req.manifest;
  if (!cand.plugin.empty())  // its code would not run here: a screen would time the baseline
    throw Error("a plugin's manifest is not screened: its code runs only in its sandboxed worker");
  const int64_t k = std::clamp<int64_t>(req.forwards, 1, 100);
  const CalibrateResult cal = do_calibrate(CalibrateRequest{base}, id);
  set_stage("screen: forwards");
  const Shape s = shape_for(base);
  // The forwards of both, interleaved, at the middle of the schedule; the best of each (an optimistic
  // bound for the candidate: the screen drops only what cannot reach a tier).
  const int64_t step = base.config.steps / 2;
  double bf = std::numeric_limits<double>::infinity(), cf = bf;
  for (int64_t i = 0; i < k; ++i) {
    bf = std::min(bf, time_forwards(base, s, 1, step, id));
    cf = std::min(cf, time_forwards(cand, s, 1, step, id));
  }
  // A step-dependent technique (sparse after its dense steps) is also timed at the last step.
  cf = std::min(cf, time_forwards(cand, s, 1, base.config.steps - 1, id));
  const bool dec = changes_decoder(cand);
  double bd = cal.decode_s, cd = bd;
  if (dec) {
    set_stage("screen: decode");
    bd = time_decode(base, s);
    cd = time_decode(cand, s);
  }
  const double text = cal.text_s;
  const int64_t forwards = cal.forwards_per_clip;
  const bool skips = !runtime::techniques::techniques_on(gates::to_runtime_options(cand)).empty() && [&] {
    for (const auto& n : runtime::techniques::techniques_on(gates::to_runtime_options(cand)))
      if (const auto* t = runtime::techniques::find(n); t && t->family == "cache") return true;
    return false;
  }();
  const double skip_ratio = req.skip_ratio ? std::clamp(*req.skip_ratio, 0.0, 1.0) : 0.0;
  const double base_est = text + forwards * bf + bd;
  const double cand_est = text + forwards * cf * (1.0 - skip_ratio) + cd;
  ScreenResult r;
  r.base_forward_s = bf;
  r.cand_forward_s = cf;
  r.decode = dec;
  r.base_decode_s = bd;
  r.cand_decode_s = cd;
  r.text_s = text;
  r.forwards_per_clip = forwards;
  if (req.skip_ratio) r.skip_ratio = skip_ratio;
  r.base_estimate_s = base_est;
  r.cand_estimate_s = cand_est;
  r.estimated_speedup = cand_est > 0 ? base_est / cand_est : 0.0;
  // A step cache whose skip ratio nobody measured cannot be bounded from forward times.
  if (skips && !req.skip_ratio) {
    r.estimated_speedup = std::nullopt;
    r.unbounded = "a step cache without a measured skip ratio: forward times cannot bound its speedup";
  }
  return r;
}

}  // namespace

int serve(const ServeOptions& options) {
  Server s(options);
  return s.run();
}

}  // namespace autooptim::workers
