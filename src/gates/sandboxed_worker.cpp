#include "gates/sandboxed_worker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/remove_tree.h"
#include "base/sha256.h"
#include "gates/drawn_request.h"
#include "gates/generation_wire.h"
#include "gates/plugin_sandbox.h"
#include "gates/plugin_schema.h"

namespace autooptim::gates {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string make_private_dir() {
  std::string tmpl = (fs::temp_directory_path() / "autooptim-worker-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw Error("cannot make a folder for a generation worker in " + tmpl);
  fs::permissions(tmpl, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  return tmpl;
}

void open_dir(const fs::path& d) {
  fs::create_directories(d);
  fs::permissions(d, fs::perms::all);
}

int make_fifo(const fs::path& p) {
  if (::mkfifo(p.c_str(), 0666) != 0) throw Error("cannot make the FIFO " + p.string());
  ::chmod(p.c_str(), 0666);
  // Read-write on our side: opening never waits for the worker, and the worker's own opens never block.
  const int fd = ::open(p.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open the FIFO " + p.string());
  ::fcntl(fd, F_SETPIPE_SZ, 1 << 20);  // a clip crosses in fewer, larger writes (best effort)
  return fd;
}

std::string dtype_name(at::ScalarType t) { return t == at::kBFloat16 ? "bf16" : "fp32"; }

}  // namespace

std::string plugin_file_sha256(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error("no such plugin file: " + path);
  return sha256_file_hex(path);
}

SandboxedWorker::SandboxedWorker(SandboxedWorkerSpec spec) : spec_(std::move(spec)) {}

SandboxedWorker::~SandboxedWorker() {
  if (box_ && box_->running()) {
    try {
      write_message(to_worker_, {{"kind", "stop"}});
      const auto t0 = Clock::now();
      while (box_->poll() && seconds_since(t0) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (const std::exception&) {
    }
    if (box_->running()) box_->kill("the gate run is over");
  }
  if (to_worker_ >= 0) ::close(to_worker_);
  if (from_worker_ >= 0) ::close(from_worker_);
  std::error_code ec;
  if (!dir_.empty()) runtime::remove_tree(dir_, ec);
}

void SandboxedWorker::start() {
  dir_ = make_private_dir();
  const fs::path d(dir_);
  open_dir(d / "channel");
  open_dir(d / "workspace");
  to_worker_ = make_fifo(d / "channel" / "requests");
  from_worker_ = make_fifo(d / "channel" / "answers");
  const runtime::LoadRequest& L = spec_.load;
  PluginProcess p;
  p.workspace = (d / "workspace").string();
  p.channel = (d / "channel").string();
  p.weights_dir = L.weights_dir;
  p.cuda = L.precision.device.is_cuda();
  p.unsandboxed = spec_.unsandboxed;
  p.uid_when_root = spec_.plugin.empty() ? 65530 : 65529;
  if (!spec_.plugin.empty()) {
    // The worker loads a copy: the file this process hashed is the file it loads, whatever happens to the original.
    open_dir(d / "plugin");
    plugin_sha256_ = plugin_file_sha256(spec_.plugin);
    p.plugin_copy = copy_plugin(spec_.plugin, plugin_sha256_, d / "plugin");
  }
  std::vector<std::string> argv = {plugin_process_binary(p),
                                   "worker",
                                   "--generation-channel",
                                   plugin_process_folder(p, p.channel),
                                   "--model",
                                   L.model,
                                   "--device",
                                   p.cuda ? "cuda" : "cpu",
                                   "--dtype",
                                   dtype_name(L.precision.compute)};
  if (L.weights_dir.empty())
    argv.push_back("--synthetic-weights");
  else
    argv.insert(argv.end(), {"--weights", plugin_process_weights(p)});
  if (L.synthetic_weights && !L.weights_dir.empty()) argv.push_back("--synthetic-weights");
  if (!p.plugin_copy.empty()) argv.insert(argv.end(), {"--plugin", plugin_process_plugin(p)});
  box_ = std::make_unique<base::Sandbox>(plugin_process_spec(p, argv, (d / "worker.log").string()));
  box_->start();
  const json r = request({{"kind", "hello"}}, spec_.start_timeout_s);
  if (r.value("plugin", std::string()) != plugin_sha256_)
    throw Error("the " + spec_.label + " worker loaded plugin '" + r.value("plugin", std::string()) + "', not " +
                plugin_sha256_);
}

bool SandboxedWorker::alive() const { return box_ && box_->running(); }

void SandboxedWorker::load_model() {
  const auto t0 = Clock::now();
  request({{"kind", "load"}}, spec_.start_timeout_s);
  load_s_ = seconds_since(t0);
}

json SandboxedWorker::describe() {
  return request({{"kind", "describe"}}, spec_.start_timeout_s).value("techniques", json::array());
}

std::string SandboxedWorker::log_tail() const {
  std::ifstream in(dir_ + "/worker.log");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
    if (lines.size() > 8) lines.erase(lines.begin());
  }
  std::string t;
  for (const auto& l : lines) t += "\n    " + l;
  return t.empty() ? "" : "; its log ends:" + t;
}

std::string SandboxedWorker::why_dead() const {
  return "the " + spec_.label + " generation worker ended (" + box_->ended_how() + ")" + log_tail();
}

WaitCheck SandboxedWorker::give_up_after(Clock::time_point t0, double timeout_s, const std::string& past) const {
  return [this, t0, timeout_s, past]() -> std::string {
    if (!box_->poll()) return why_dead();
    if (seconds_since(t0) > timeout_s)
      return "the " + spec_.label + " generation worker" + past + " " +
             std::to_string(static_cast<int64_t>(timeout_s)) + " s";
    return "";
  };
}

json SandboxedWorker::request(const json& req, double timeout_s) {
  if (!box_) throw Error("the " + spec_.label + " generation worker was not started");
  const auto t0 = Clock::now();
  write_message(to_worker_, req);
  WireMessage m = read_message(from_worker_, {}, give_up_after(t0, timeout_s, " did not answer in"));
  if (!m.header.value("ok", false))
    throw Error("the " + spec_.label +
                " generation worker: " + m.header.value("error", std::string("no reason given")));
  return m.header;
}

RunOutput SandboxedWorker::run(const Manifest& m, const Prompt& prompt, std::optional<int64_t> seed) {
  return run_timed(m, {prompt}, seed, false);
}

RunOutput SandboxedWorker::run_drawn(const Manifest& m, const std::vector<Prompt>& choices) {
  if (choices.empty()) throw Error("run_drawn: no prompts to draw from");
  return run_timed(m, choices, std::nullopt, true);
}

RunOutput SandboxedWorker::run_timed(const Manifest& m, const std::vector<Prompt>& choices, std::optional<int64_t> seed,
                                     bool drawn) {
  RunOutput out;
  const RunConfig& c = m.config;
  const std::vector<int64_t> shape = {c.frames, 3, c.height, c.width};
  out.prompt = choices.front();
  out.seed = seed.value_or(c.seed);
  const json manifest = to_json(m);
  // The timer starts before the request is decided and handed over, and stops at the clip's last byte.
  const auto t0 = Clock::now();
  if (drawn) {
    const DrawnRequest d = draw_request(choices, c.seed);
    out.prompt = d.prompt;
    out.seed = d.seed;
  }
  // Only the text: the prompt's id, category and splits stay in the gate.
  write_message(to_worker_, {{"kind", "run"}, {"manifest", manifest}, {"text", out.prompt.text}, {"seed", out.seed}});
  WireMessage a;
  try {
    a = read_message(from_worker_, shape, give_up_after(t0, spec_.run_timeout_s, "'s run took over"));
  } catch (const Error& e) {
    // The worker died, hung or answered garbage: this run failed (a baseline's failure ends the gate, a
    // candidate's is its rejection). A worker in an unknown state answers nothing more.
    if (box_->running()) box_->kill(e.what());
    a.header = {{"ok", false}, {"error", e.what()}};
  }
  out.seconds = seconds_since(t0);
  ++runs_;
  if (!a.header.value("ok", false) || !a.video.defined()) {
    out.error = "the " + spec_.label + " worker: " + a.header.value("error", std::string("no clip and no reason"));
    out.video = at::full(shape, std::numeric_limits<float>::quiet_NaN());
    return out;
  }
  out.video = a.video;
  out.unwritten_at_return = !at::isfinite(out.video).all().item<bool>();
  try {
    out.trace = trace_from_json(a.header.at("trace"));
    out.times = stage_times_from_json(a.header.at("times"));
    out.pre_sync_s = std::max(0.0, a.header.at("pre_sync_s").get<double>());
  } catch (const std::exception& e) {
    out.error = "the " + spec_.label + " worker's answer: " + e.what();
  }
  return out;
}

double SandboxedWorker::worker_cpu_seconds() {
  if (!box_) return 0;
  box_->poll();
  return box_->cpu_s();
}

json SandboxedWorker::report() const {
  return {{"label", spec_.label},
          {"isolation", spec_.unsandboxed ? "process (no OS sandbox on this machine)" : "bwrap sandbox"},
          {"plugin", plugin_sha256_},
          {"load_s", load_s_},
          {"runs", runs_},
          {"run_timeout_s", spec_.run_timeout_s},
          {"cpu_s", box_ ? box_->cpu_s() : 0.0},
          {"ended", box_ && !box_->running() ? box_->ended_how() : "running"}};
}

namespace {

// Where the OS sandbox is missing: a plain process when allowed, else an error naming the way out.
bool without_os_sandbox(bool allowed) {
  const std::string why = base::sandbox_unavailable_reason();
  if (why.empty()) return false;
  if (!allowed)
    throw Error("a plugin runs only in an OS sandbox, and this machine has none (" + why +
                "); --plugin-without-sandbox runs it as a plain process of its own");
  return true;
}

}  // namespace

std::unique_ptr<SandboxedWorker> start_plugin_candidate(const runtime::LoadRequest& load, const std::string& file,
                                                        bool without_sandbox, double run_timeout_s) {
  SandboxedWorkerSpec spec{load, file, "candidate", without_os_sandbox(without_sandbox)};
  spec.run_timeout_s = run_timeout_s;
  auto w = std::make_unique<SandboxedWorker>(spec);
  w->start();
  w->load_model();
  return w;
}

PluginGateWorkers start_plugin_workers(const runtime::LoadRequest& load, const std::string& sha256,
                                       const GateSettings& S) {
  const auto it = S.plugin_files.find(sha256);
  if (it == S.plugin_files.end())
    throw Error("the manifest pins plugin " + sha256 + ", whose file the gate was not given (gate --plugin FILE)");
  const bool plain = without_os_sandbox(S.plugin_without_sandbox);
  PluginGateWorkers w;
  SandboxedWorkerSpec cand{load, it->second, "candidate", plain};
  if (S.plugin_run_timeout_s > 0) cand.run_timeout_s = S.plugin_run_timeout_s;  // else set after the baseline's warm-up
  w.candidate = std::make_unique<SandboxedWorker>(cand);
  w.baseline = std::make_unique<SandboxedWorker>(SandboxedWorkerSpec{load, "", "baseline", plain});
  w.candidate->start();
  w.baseline->start();
  w.candidate->load_model();
  w.baseline->load_model();
  return w;
}

json PluginGateWorkers::report() const {
  json j = json::array();
  for (const auto* s : {candidate.get(), baseline.get()})
    if (s) j.push_back(s->report());
  return j;
}

void PluginGateWorkers::save_logs(const std::string& dir) const {
  std::error_code ec;
  if (candidate)
    fs::copy_file(candidate->log_path(), fs::path(dir) / "candidate-worker.log", fs::copy_options::overwrite_existing,
                  ec);
  if (baseline)
    fs::copy_file(baseline->log_path(), fs::path(dir) / "baseline-worker.log", fs::copy_options::overwrite_existing,
                  ec);
}

std::string describe_plugin(const std::string& path, bool without_sandbox) {
  runtime::LoadRequest none;  // describing loads no model
  none.synthetic_weights = true;
  SandboxedWorkerSpec spec{none, path, "plugin's", without_os_sandbox(without_sandbox)};
  spec.start_timeout_s = 300;  // loading a plugin is quick: one whose entry point hangs fails in bounded time
  SandboxedWorker w(spec);
  w.start();
  register_plugin_schema(w.plugin_sha256(), w.describe());
  return w.plugin_sha256();
}

std::string ensure_plugin_described(const std::string& path, bool without_sandbox) {
  const std::string sha = plugin_file_sha256(path);
  return plugin_known(sha) ? sha : describe_plugin(path, without_sandbox);
}

}  // namespace autooptim::gates
