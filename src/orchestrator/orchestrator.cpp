#include "orchestrator/orchestrator.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "gates/atomic_file.h"
#include "gates/prompts.h"
#include "orchestrator/report.h"
#include "runtime/build_info.h"
#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
extern char** environ;

namespace autooptim::orchestrator {
namespace {

struct Buckets {
  static const std::vector<std::pair<std::string, double>>& all() {
    static const std::vector<std::pair<std::string, double>> b = {{"1.5x", 1.5}, {"2x", 2.0}, {"3x", 3.0}, {"4x", 4.0}};
    return b;
  }
};

std::string slug(const std::string& id) {
  std::string s = id;
  for (auto& c : s)
    if (c == '/') c = '_';
  return s;
}

constexpr int kReportSchemaVersion = 2;

std::string num_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

void write_json(const fs::path& p, const json& j) { gates::write_file_atomic(p.string(), j.dump(2) + "\n"); }

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// The run's progress: a live line on a terminal, plain lines in a log file (runtime/log.h).
class Progress {
 public:
  Progress(Clock::time_point start, double budget_s) : start_(start), budget_s_(budget_s) {}
  void show(const std::string& phase, int64_t trial, int64_t trials, double best, const std::string& what = "") {
    line_.update("[" + phase + "]" + (what.empty() ? "" : " " + what), counters(trial, trials, best));
  }
  void gate(const std::string& phase, const gates::GateProgress& p, int64_t trial, int64_t trials, double best) {
    const int s = static_cast<int>(p.elapsed_s);
    line_.update("[" + phase + "] " + p.manifest_id + " on " + p.split,
                 p.stage + " (run " + std::to_string(p.run) + "/" + std::to_string(p.runs) + ", " + std::to_string(s / 60) + "m" +
                     (s % 60 < 10 ? "0" : "") + std::to_string(s % 60) + "s)  " + counters(trial, trials, best));
  }
  void line(const std::string& msg) { line_.event(msg); }
  void warn(const std::string& msg) {
    line_.clear();
    log::warn(msg);
  }
  void clear() { line_.clear(); }
  double left_s() const { return budget_s_ - std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  std::string counters(int64_t trial, int64_t trials, double best) const {
    const double left = std::max(0.0, left_s());
    char b[160];
    std::snprintf(b, sizeof b, "gate run %lld/%lld  best %.2fx  %dm%02ds left", static_cast<long long>(trial),
                  static_cast<long long>(trials), best, static_cast<int>(left / 60), static_cast<int>(left) % 60);
    return b;
  }
  Clock::time_point start_;
  double budget_s_;
  log::Progress line_;
};

// SIGINT/SIGTERM while a run is in progress: the handler only records the signal; the run stops its
// executors, ends the gate in progress (its progress hook throws Interrupted) and writes the report.
// A second signal gets the default action (SA_RESETHAND), so a stuck run still dies on a second ^C.
volatile sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }

struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

class StopSignals {
 public:
  StopSignals() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int signal() { return g_signal; }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

struct Candidate {
  gates::Manifest m;
  std::string hash;
  json val;      // verdict on the gating split
  json heldout;  // verdict on the held-out split (tier candidates only)
  // A candidate the budget left ungated has a null verdict.
  template <typename T>
  T get(const char* k, T d) const { return val.is_object() ? val.value(k, d) : d; }
  bool accepted() const { return get("accepted", false); }
  // Passed every gate but the official-config one: what a reduced-configuration run can show.
  bool survived_reduced() const {
    if (accepted()) return true;
    if (!val.contains("gates")) return false;
    for (const auto& [g, x] : val["gates"].items())
      if (g != "official_config" && !x.value("pass", false)) return false;
    return true;
  }
  double speedup() const { return get("speedup", 0.0); }
  double psnr() const { return get("psnr", 0.0); }
  double ssim() const { return get("ssim", 0.0); }
};

// Spawns `autooptim executor ...` for one family; its output goes to log. The child stays in the run's
// process group (a ^C at the terminal or a scheduler's signal to the group reaches it too), gets
// SIGTERM when the orchestrator dies (PR_SET_PDEATHSIG), and starts with SIGINT/SIGTERM blocked: a
// signal that arrives before the executor has installed its handler waits for it instead of killing
// the process with an empty log. The log starts with a line written before exec for the same reason.
pid_t spawn_executor(const std::vector<std::string>& args, const fs::path& log_path, const std::string& family) {
  // Everything the child needs is built before fork: after it only async-signal-safe calls are made.
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "AUTOOPTIM_LOG_LEVEL=", 20) != 0) env_strings.push_back(*e);
  env_strings.push_back(std::string("AUTOOPTIM_LOG_LEVEL=") + log::level_name(log::level()));
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string header = "autooptim executor " + family + ": starting (" + gates::utc_timestamp() + "):";
  for (const auto& a : args) header += " " + a;
  header += "\n";
  const std::string log_file = log_path.string();
  const pid_t parent = getpid();

  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &old);
  const pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    throw Error("cannot start an executor process: fork failed");
  }
  if (pid == 0) {
    // The handlers of the parent are reset by exec; the mask (SIGINT/SIGTERM blocked) is kept.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the orchestrator died before prctl
    const int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t n = ::write(fd, header.data(), header.size());
      (void)n;
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    execve("/proc/self/exe", argv.data(), envp.data());
    const char msg[] = "execve of /proc/self/exe failed\n";
    ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &old, nullptr);
  return pid;
}

// The last non-empty line of a log (why an executor failed), at most 300 characters.
std::string last_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

// The quality per prompt of a gate run (its quality.json), {} when there is none.
json read_quality(const fs::path& dir) {
  std::ifstream in(dir / "quality.json");
  if (!in) return json::object();
  try {
    const json q = json::parse(in);
    json out = json::object();
    if (q.contains("clips") && q["clips"].is_object())
      for (const auto& [id, c] : q["clips"].items())
        if (c.is_object() && c.contains("psnr_mean"))
          out[id] = {{"psnr", c.value("psnr_mean", 0.0)}, {"ssim", c.value("ssim_mean", 0.0)}};
    return out;
  } catch (const std::exception&) {
    return json::object();
  }
}

// The clips a gate run wrote (relative to the run folder), by prompt id.
json clip_links(const fs::path& out, const fs::path& dir) {
  json links = json::object();
  std::error_code ec;
  if (!fs::is_directory(dir / "videos", ec)) return links;
  for (const auto& e : fs::directory_iterator(dir / "videos", ec))
    links[e.path().stem().string()] = fs::relative(e.path(), out, ec).string();
  return links;
}

// What a family's executor measured (outbox/<family>/trials.jsonl) and proposed.
json explored(const fs::path& box) {
  json trials = json::array();
  std::ifstream in(box / "trials.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    try {
      const json t = json::parse(line);
      trials.push_back({{"label", t.value("label", "")}, {"speedup", t.value("speedup", 0.0)}, {"psnr", t.value("psnr_min", 0.0)},
                        {"prompts", t.value("prompts", 0)}, {"engaged", t.value("not_engaged", json::array()).empty()}});
    } catch (const std::exception&) {
      // a torn last line of a killed executor
    }
  }
  json proposed = json::array();
  std::error_code ec;
  if (fs::is_directory(box, ec))
    for (const auto& e : fs::directory_iterator(box, ec))
      if (e.path().extension() == ".json" && e.path().filename().string().rfind(".tmp", 0) != 0) proposed.push_back(e.path().stem().string());
  std::sort(proposed.begin(), proposed.end());
  return {{"trials", trials}, {"proposed", proposed}};
}

}  // namespace

json compose_flags(const json& base_flags, const std::vector<json>& parts) {
  json out = json::object();
  for (const auto& flags : parts)
    for (const auto& [k, v] : flags.items()) {
      if (k == "dtype" || k == "cpu_threads") continue;
      if (base_flags.contains(k) && base_flags[k] == v) continue;  // the part leaves it at the baseline's
      if (out.contains(k) && out[k] != v) return json();
      out[k] = v;
    }
  return out;
}

std::optional<gates::Manifest> compose_manifest(const gates::Manifest& base, const std::vector<const gates::Manifest*>& parts) {
  std::vector<json> part_flags;
  for (const auto* p : parts) part_flags.push_back(p->flags);
  const json flags = compose_flags(gates::to_json(base)["flags"], part_flags);
  if (flags.is_null()) return std::nullopt;
  gates::Manifest m = base;
  m.kind = "patch";
  m.family = "composite";
  m.base = base.id;
  m.flags = flags;
  m.lossless = std::all_of(parts.begin(), parts.end(), [](const gates::Manifest* p) { return p->lossless; });
  std::string id = base.model + "/composite/";
  for (size_t k = 0; k < parts.size(); ++k) {
    m.parents.push_back(parts[k]->id);
    id += (k ? "-plus-" : "") + parts[k]->id.substr(parts[k]->id.rfind('/') + 1);
  }
  m.id = id;
  m.description = "composition of the best accepted candidate of each family";
  return gates::parse_manifest(gates::to_json(m), "composition " + id);
}

void validate(const RunRequest& req) {
  auto fail = [](const std::string& what) { throw Error(what); };
  if (req.out_dir.empty()) fail("--out must name a folder");
  if (req.budget_trials < 1) fail("--budget-trials must be at least 1, got " + std::to_string(req.budget_trials));
  if (!(req.budget_minutes > 0) || !std::isfinite(req.budget_minutes) || req.budget_minutes > 60.0 * 24 * 365)
    fail("--budget-minutes must be a positive number of minutes (at most a year), got " + std::to_string(req.budget_minutes));
  if (req.executor_trials < 1) fail("--executor-trials must be at least 1, got " + std::to_string(req.executor_trials));
  if (!contains(gates::visible_splits(), req.split))
    fail("--split '" + req.split + "': candidates are gated on a visible split (" + join(gates::visible_splits()) +
         "); the held-out splits only check the tier candidates (--heldout-split)");
  if (!contains(gates::heldout_splits(), req.heldout_split))
    fail("--heldout-split '" + req.heldout_split + "' is not a held-out split (" + join(gates::heldout_splits()) + ")");
  const auto& g = req.gate;
  if (g.timing_repeats < 1 || g.timing_repeats > 1000) fail("--repeats must be in [1, 1000], got " + std::to_string(g.timing_repeats));
  if (g.max_prompts < 0) fail("--max-prompts must be 0 (all) or positive, got " + std::to_string(g.max_prompts));
  if (!std::isfinite(g.min_psnr) || g.min_psnr < 0 || g.min_psnr > 200)
    fail("--min-psnr must be a finite number of dB in [0, 200], got " + std::to_string(g.min_psnr));
  if (!std::isfinite(g.min_ssim) || g.min_ssim < 0 || g.min_ssim > 1)
    fail("--min-ssim must be in [0, 1], got " + std::to_string(g.min_ssim));
  if (req.frames && (req.frames < 1 || req.frames > 100001 || req.frames % 4 != 1))
    fail("--frames " + std::to_string(req.frames) + " is not of the form 4k+1 in [1, 100001]");
  if (req.steps && (req.steps < 1 || req.steps > 1000)) fail("--steps must be in [1, 1000], got " + std::to_string(req.steps));
  for (auto [name, v] : {std::pair<const char*, int64_t>{"--height", req.height}, {"--width", req.width}})
    if (v && (v < 32 || v > 16384 || v % 32))
      fail(std::string(name) + " " + std::to_string(v) + " is not a multiple of 32 in [32, 16384]");
}

RunOutcome judge_run(const json& r, const std::string& fail_if_no_tier) {
  RunOutcome o;
  if (r.contains("interrupted") && r["interrupted"].is_object()) {
    o.signal = r["interrupted"].value("signal", 0);
    o.exit_code = 128 + o.signal;
    o.problems.push_back(std::string("interrupted by ") + signal_name(o.signal) + ": the report covers what was done; continue with --resume");
    return o;
  }
  // Executors: all failed is a run that explored nothing; some failed is worth a warning.
  int started = 0, failed = 0;
  std::string failures;
  for (const auto& e : r.value("executors", json::array())) {
    if (e.value("state", "") == "skipped") continue;
    ++started;
    if (e.value("state", "") == "failed") {
      ++failed;
      failures += std::string(failures.empty() ? "" : "; ") + e.value("family", "?") + ": " + e.value("reason", "");
    }
  }
  if (started > 0 && failed == started) o.problems.push_back("every executor failed (" + failures + ")");
  else if (failed > 0) o.warnings.push_back(std::to_string(failed) + " of " + std::to_string(started) + " executors failed (" + failures + ")");
  const json& b = r.value("baseline", json::object());
  if (!(b.value("seconds", 0.0) > 0))
    o.problems.push_back("the baseline was not measured" + (b.value("reason", "").empty() ? std::string() : ": " + b.value("reason", "")));
  int gated = 0, total = 0;
  for (const auto& c : r.value("candidates", json::array())) {
    ++total;
    gated += c.value("gated", false);
  }
  int cut_short = 0;
  for (const auto& e : r.value("executors", json::array())) cut_short += e.value("state", "") == "stopped" || e.value("state", "") == "killed";
  if (total == 0)
    o.problems.push_back("no candidate to gate: the executors proposed nothing" +
                         (cut_short ? " (" + std::to_string(cut_short) + " stopped at the exploration budget, half of --budget-minutes: give them more time)"
                                    : std::string()));
  else if (gated == 0) o.problems.push_back("none of the " + std::to_string(total) + " candidates was gated (" + r.value("budget_note", std::string("budget spent")) + ")");
  if (!o.problems.empty()) {
    o.exit_code = 2;
    return o;
  }
  if (!fail_if_no_tier.empty()) {
    const json& tiers = r.value("tiers", json::object());
    bool any = false;
    for (const auto& [k, t] : tiers.items()) any = any || !t.is_null();
    if (fail_if_no_tier == "any" && !any) o.problems.push_back("--fail-if-no-tier: no tier was reached");
    else if (fail_if_no_tier != "any" && (!tiers.contains(fail_if_no_tier) || tiers[fail_if_no_tier].is_null()))
      o.problems.push_back("--fail-if-no-tier " + fail_if_no_tier + ": that tier was not reached");
    if (!o.problems.empty()) {
      for (const auto& n : r.value("tier_notes", json::object()).value(fail_if_no_tier == "any" ? "1.5x" : fail_if_no_tier, json::array()))
        o.problems.back() += "; " + n.get<std::string>();
      o.exit_code = 1;
    }
  }
  return o;
}

RunOutcome run(const RunRequest& req) {
  // Everything that can be checked is checked before the run folder is touched: a failed start
  // must leave nothing that makes the corrected retry look like a second run.
  validate(req);
  const auto start = Clock::now();
  const std::string started_at = gates::utc_timestamp();
  Progress progress(start, req.budget_minutes * 60.0);
  const fs::path out(req.out_dir);

  // Baseline: the harness's pinned one (never a file of anyone's choosing), with the reduced
  // configuration applied when asked for.
  gates::Manifest base = gates::pinned_baseline(req.load.model);
  {
    // The installed manifests/<model>/baseline.json is a copy of the pinned baseline; one that differs
    // is refused rather than silently ignored (it would have been the denominator before).
    const fs::path installed = fs::path(req.manifests_dir) / req.load.model / "baseline.json";
    if (fs::exists(installed) && gates::manifest_hash(gates::load_manifest(installed.string())) != gates::manifest_hash(base))
      throw Error(installed.string() + ": differs from the harness's pinned baseline of " + req.load.model +
                  "; the baseline always comes from the harness (restore the file or drop --manifests-dir)");
  }
  if (req.frames) base.config.frames = req.frames;
  if (req.steps) base.config.steps = req.steps;
  if (req.height) base.config.height = req.height;
  if (req.width) base.config.width = req.width;
  base = gates::parse_manifest(gates::to_json(base), "baseline with the run's configuration");
  const bool official = base.config == gates::official_config(base.model);
  // The prompts, held-out ones included (their pin is checked here, not at the first tier candidate).
  const auto all_prompts = gates::load_prompts(req.prompts_dir, true);
  if (all_prompts.split(req.split).empty()) throw Error("--split '" + req.split + "' holds no prompts in " + req.prompts_dir);
  if (all_prompts.split(req.heldout_split).empty())
    throw Error("--heldout-split '" + req.heldout_split + "' holds no prompts in " + req.prompts_dir);
  const auto visible = gates::load_prompts(req.prompts_dir, false);

  // One run per folder at a time: a second `run` or `--resume` beside a live one would gate the same
  // candidates twice and interleave their ledger rows.
  const bool created_out = !fs::exists(out);
  fs::create_directories(out);
  const bool lock_existed = fs::exists(out / "run.lock");
  std::optional<gates::FolderLock> lock;
  std::optional<gates::Worker> worker_slot;
  try {
    lock.emplace((out / "run.lock").string(), "--out folder " + out.string());
    if (!req.resume && fs::exists(out / "ledger.jsonl") && fs::file_size(out / "ledger.jsonl") > 0)
      throw Error(out.string() + ": already holds a run (ledger.jsonl); use --resume to continue it or choose another --out");
    progress.line("loading " + req.load.model + " (once for every gate run)");
    worker_slot.emplace(req.load);
  } catch (...) {
    // Nothing of the run was written yet; a folder this call made holds only the lock file.
    lock.reset();
    std::error_code ec;
    if (!lock_existed) fs::remove(out / "run.lock", ec);
    if (created_out) fs::remove(out, ec);  // only if empty
    throw;
  }
  gates::Worker& worker = *worker_slot;

  fs::create_directories(out / "manifests" / req.load.model);
  const fs::path base_path = out / "manifests" / req.load.model / "baseline.json";
  write_json(base_path, gates::to_json(base));
  // Executors see the visible prompts only: a file of their own.
  const fs::path visible_path = out / "prompts-visible.jsonl";
  {
    std::string text;
    for (const auto& p : visible.all())
      text += json{{"id", p.id}, {"category", p.category}, {"prompt", p.text}, {"splits", p.splits}}.dump() + "\n";
    gates::write_file_atomic(visible_path.string(), text);
  }
  fs::create_directories(out / "outbox");
  fs::create_directories(out / "gates");
  gates::Ledger ledger((out / "ledger.jsonl").string());
  // Prompt id -> category, for the report's per-category quality (held-out ids resolved by the gate's own files).
  json categories = json::object();
  const auto every_prompt = gates::load_prompts(req.prompts_dir, true);
  for (const auto& p : every_prompt.all()) categories[p.id] = p.category;

  // Verdicts already in the ledger (resume): manifest hash + split -> row, when decided in this
  // environment (build, weights, device, dtype).
  std::map<std::pair<std::string, std::string>, json> done;
  for (const auto& row : ledger.read_all())
    if (row.contains("manifest_hash") && row.contains("split") && gates::same_environment(row, worker))
      done[{row["manifest_hash"].get<std::string>(), row["split"].get<std::string>()}] = row;

  const StopSignals signals;
  gates::GateSettings gs = req.gate;
  gs.prompts_dir = req.prompts_dir;
  gs.baseline_config = base.config;  // the pinned baseline at this run's configuration
  gs.cache_dir = (out / "baseline-cache").string();
  if (req.load.precision.device.is_cuda()) gs.exact_off_identity = false;

  int64_t gate_runs = 0;
  double best = 1.0, gating_s = 0;
  std::string phase = "baseline";
  std::map<std::pair<std::string, std::string>, std::string> not_gated;  // why a gate() returned null
  gs.progress = [&](const gates::GateProgress& p) {
    if (StopSignals::signal()) throw Interrupted();
    progress.gate(phase, p, gate_runs, req.budget_trials, best);
  };
  auto gate = [&](const gates::Manifest& m, const std::string& split, const std::string& ph) -> json {
    const std::string h = gates::manifest_hash(m);
    if (auto it = done.find({h, split}); it != done.end()) return it->second;
    std::string why;
    if (StopSignals::signal()) why = std::string("interrupted by ") + signal_name(StopSignals::signal()) + " before its gate run";
    else if (gate_runs >= req.budget_trials) why = "gate-run budget spent (" + std::to_string(req.budget_trials) + " of --budget-trials)";
    else if (progress.left_s() <= 0) why = "time budget spent (--budget-minutes " + num_text(req.budget_minutes) + ")";
    if (!why.empty()) {
      not_gated[{h, split}] = why;
      return json();
    }
    ++gate_runs;
    phase = ph;
    progress.show(ph, gate_runs, req.budget_trials, best, m.id + " on " + split);
    const fs::path dir = out / "gates" / slug(m.id) / split;
    const auto t0 = Clock::now();
    json v;
    try {
      v = gates::run_gate(worker, m, split, dir.string(), gs, &ledger).to_json();
    } catch (const Interrupted&) {
      gating_s += std::chrono::duration<double>(Clock::now() - t0).count();
      not_gated[{h, split}] = std::string("interrupted by ") + signal_name(StopSignals::signal()) + " during its gate run";
      return json();
    } catch (const Error& e) {
      // A candidate that cannot even run is rejected with the reason; the run goes on.
      v = {{"manifest", m.id}, {"manifest_hash", h}, {"split", split}, {"accepted", false}, {"speedup", 0.0}, {"psnr", 0.0}, {"ssim", 0.0},
           {"failure_signature", "could-not-run"}, {"gates", {{"artifacts", {{"pass", false}, {"reason", e.what()}}}}}};
      json row = v;
      for (const auto& [k, val] : gates::gate_environment(worker).items()) row[k] = val;
      ledger.append(row);
    }
    gating_s += std::chrono::duration<double>(Clock::now() - t0).count();
    v["out_dir"] = dir.string();
    done[{h, split}] = v;
    if (v.value("accepted", false)) best = std::max(best, v.value("speedup", 0.0));
    std::string failed;
    const json verdict_gates = v.value("gates", json::object());
    for (const auto& [g, x] : verdict_gates.items())
      if (!x.value("pass", false) && failed.empty()) failed = g + ": " + x.value("reason", "");
    progress.line("gate " + m.id + " on " + split + ": " + (v.value("accepted", false) ? "ACCEPTED " : "rejected ") +
                  num_text(v.value("speedup", 0.0)) + "x, worst PSNR " + quality_text(v.value("psnr", 0.0), true) +
                  (failed.empty() ? "" : " (" + failed + ")"));
    return v;
  };

  // 1. The baseline against itself: its time is the denominator, and it fills the output cache.
  progress.line("baseline: " + base.id + (official ? " (official configuration)" : " (REDUCED configuration: no tier can be won)"));
  const json base_verdict = gate(base, req.split, "baseline");
  const double base_seconds = base_verdict.is_object() ? base_verdict.value("baseline_seconds", 0.0) : 0.0;

  // 2. Executors, one process per family, in parallel; each writes manifests to its outbox.
  const auto explore_start = Clock::now();
  const double explore_deadline_s = req.budget_minutes * 60.0 * 0.5;
  std::map<pid_t, std::string> running;
  json executors = json::array();
  std::map<std::string, size_t> exec_index;
  for (const auto& fam : req.families) {
    const fs::path box = out / "outbox" / fam;
    exec_index[fam] = executors.size();
    executors.push_back({{"family", fam}, {"log", "outbox/" + fam + ".log"}, {"state", "skipped"}, {"reason", ""}});
    if (req.resume && fs::exists(box / "done")) {
      executors.back()["reason"] = "finished in an earlier run (outbox/" + fam + "/done)";
      continue;
    }
    if (StopSignals::signal()) {
      executors.back()["state"] = "interrupted";
      executors.back()["reason"] = "not started: the run was interrupted";
      continue;
    }
    fs::create_directories(box);
    fs::remove(box / "done");
    std::vector<std::string> args = {"autooptim", "executor", "--family", fam};
    args.insert(args.end(), req.model_cli.begin(), req.model_cli.end());
    for (const auto& a : std::vector<std::string>{"--base", base_path.string(), "--prompts", visible_path.string(), "--outbox",
                                                  box.string(), "--budget-trials", std::to_string(req.executor_trials),
                                                  "--min-psnr", std::to_string(req.gate.min_psnr),
                                                  "--device-lock", (out / "outbox" / "device.lock").string()})
      args.push_back(a);
    running[spawn_executor(args, out / "outbox" / (fam + ".log"), fam)] = fam;
    executors.back()["state"] = "running";
  }
  // At the exploration deadline SIGTERM lets each executor finish its trial in progress and propose
  // from what it measured; one still busy after the grace period is killed (its proposals stay). An
  // interruption does the same with a short grace, and clears the executors' done markers so that
  // --resume explores again.
  const double grace_s = std::clamp(req.budget_minutes * 60.0 * 0.1, 10.0, 120.0);
  const double interrupt_grace_s = 5.0;
  std::optional<Clock::time_point> stopped_at;
  bool stopped_by_signal = false;
  auto finish = [&](const std::string& fam, const std::string& state, const std::string& reason) {
    auto& e = executors[exec_index[fam]];
    e["state"] = state;
    e["reason"] = reason;
    if (stopped_by_signal) fs::remove(out / "outbox" / fam / "done");
  };
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && running.count(pid)) {
      const std::string fam = running[pid];
      running.erase(pid);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      const std::string code = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                                 : std::string("signal ") + std::to_string(WTERMSIG(status));
      if (!ok) {
        const std::string why = code + ", see outbox/" + fam + ".log: " + last_line(out / "outbox" / (fam + ".log"));
        finish(fam, stopped_by_signal ? "interrupted" : "failed", why);
        progress.warn("executor " + fam + (stopped_by_signal ? " interrupted (" : " failed (") + why + ")");
      } else {
        finish(fam, stopped_by_signal ? "interrupted" : stopped_at ? "stopped" : "finished",
               stopped_by_signal ? "stopped by the interruption" : stopped_at ? "stopped at the exploration budget" : "finished its search");
        progress.line("executor " + fam + (stopped_by_signal ? " stopped (interrupted)" : stopped_at ? " stopped at the exploration budget" : " finished"));
      }
      continue;
    }
    const auto now = Clock::now();
    if (StopSignals::signal() && !stopped_by_signal) {
      stopped_by_signal = true;
      progress.warn(std::string(signal_name(StopSignals::signal())) + ": stopping the executors and writing the report of what was done");
      for (const auto& [p, fam] : running) kill(p, SIGTERM);
      stopped_at = now;
    } else if (!stopped_at && std::chrono::duration<double>(now - start).count() > explore_deadline_s) {
      for (const auto& [p, fam] : running) kill(p, SIGTERM);
      stopped_at = now;
    } else if (stopped_at && std::chrono::duration<double>(now - *stopped_at).count() > (stopped_by_signal ? interrupt_grace_s : grace_s)) {
      for (const auto& [p, fam] : running) {
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        finish(fam, stopped_by_signal ? "interrupted" : "killed",
               "still busy " + std::to_string(static_cast<int>(stopped_by_signal ? interrupt_grace_s : grace_s)) + " s after " +
                   (stopped_by_signal ? "the interruption" : "the exploration budget") + "; killed");
        progress.line("executor " + fam + " killed: " + executors[exec_index[fam]].value("reason", ""));
      }
      running.clear();
      break;
    }
    progress.show(stopped_at ? "stopping" : "explore", gate_runs, req.budget_trials, best);
    std::this_thread::sleep_for(std::chrono::milliseconds(stopped_at ? 100 : 300));
  }
  const double explore_s = std::chrono::duration<double>(Clock::now() - explore_start).count();
  for (auto& e : executors) e["explored"] = explored(out / "outbox" / e.value("family", ""));

  // 3. Collect, de-duplicate by manifest hash, gate on the visible split.
  std::vector<Candidate> cands;
  std::set<std::string> seen = {gates::manifest_hash(base)};
  std::vector<fs::path> files;
  for (const auto& fam : req.families)
    if (fs::is_directory(out / "outbox" / fam))
      for (const auto& e : fs::directory_iterator(out / "outbox" / fam))
        if (e.path().extension() == ".json" && e.path().filename().string().rfind(".tmp", 0) != 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      gates::Manifest m = gates::load_manifest(f.string());
      const std::string h = gates::manifest_hash(m);
      if (!seen.insert(h).second) continue;
      cands.push_back({m, h, json(), json()});
    } catch (const Error& e) {
      progress.warn(std::string("ignoring a malformed proposal: ") + e.what());
    }
  }
  for (auto& c : cands) c.val = gate(c.m, req.split, "gate");

  // 4. Compose the best accepted candidate of each family; a composition is gated again.
  std::map<std::string, const Candidate*> best_of;
  // On a reduced configuration nothing can be accepted (official-config gate); its survivors of every
  // other gate are composed all the same, so the composition step is exercised and reported.
  auto survivor = [official](const Candidate& c) { return official ? c.accepted() : c.survived_reduced(); };
  for (const auto& c : cands)
    if (survivor(c) && (!best_of.count(c.m.family) || c.speedup() > best_of[c.m.family]->speedup())) best_of[c.m.family] = &c;
  std::vector<std::vector<const Candidate*>> combos;
  std::vector<const Candidate*> fams;
  for (const auto& kv : best_of) fams.push_back(kv.second);
  for (size_t i = 0; i < fams.size(); ++i)
    for (size_t j = i + 1; j < fams.size(); ++j) combos.push_back({fams[i], fams[j]});
  if (fams.size() >= 3) combos.push_back(fams);
  std::vector<Candidate> composed;
  for (const auto& parts : combos) {
    std::vector<const gates::Manifest*> pm;
    for (const auto* c : parts) pm.push_back(&c->m);
    std::optional<gates::Manifest> composite;
    try {
      composite = compose_manifest(base, pm);
    } catch (const Error& e) {
      progress.warn(std::string("skipping a composition that is not a valid manifest: ") + e.what());
      continue;
    }
    if (!composite) continue;  // the parts set one flag differently
    const gates::Manifest& m = *composite;
    if (!seen.insert(gates::manifest_hash(m)).second) continue;
    composed.push_back({m, gates::manifest_hash(m), json(), json()});
  }
  for (auto& c : composed) {
    c.val = gate(c.m, req.split, "compose");
    cands.push_back(c);
  }

  // 5. Tiers: per bucket, the accepted candidate with the best quality, confirmed on held-out prompts.
  json tiers = json::object(), tier_notes = json::object();
  for (const auto& [bucket, need] : Buckets::all()) {
    std::vector<Candidate*> pool;
    for (auto& c : cands)
      if (c.accepted() && c.speedup() >= need) pool.push_back(&c);
    std::sort(pool.begin(), pool.end(), [](const Candidate* a, const Candidate* b) {
      return a->psnr() != b->psnr() ? a->psnr() > b->psnr() : a->speedup() > b->speedup();
    });
    tiers[bucket] = nullptr;
    json notes = json::array();
    for (auto* c : pool) {
      if (c->heldout.is_null()) c->heldout = gate(c->m, req.heldout_split, "heldout");
      if (!c->heldout.is_object()) {
        notes.push_back(c->m.id + " reached " + num_text(c->speedup()) + "x on " + req.split + " but its held-out check was not run: " +
                        not_gated[{c->hash, req.heldout_split}]);
        break;
      }
      if (!c->heldout.value("accepted", false) || c->heldout.value("speedup", 0.0) < need) {
        notes.push_back(c->m.id + " reached " + num_text(c->speedup()) + "x on " + req.split + " but not on the held-out prompts (" +
                        num_text(c->heldout.value("speedup", 0.0)) + "x" +
                        (c->heldout.value("accepted", false) ? "" : ", rejected: " + c->heldout.value("failure_signature", std::string("?"))) + ")");
        continue;
      }
      tiers[bucket] = {{"manifest", c->m.id},
                       {"speedup", c->speedup()},
                       {"psnr", c->psnr()},
                       {"ssim", c->ssim()},
                       {"family", c->m.family},
                       {"flags", c->m.flags},
                       {"heldout_accepted", true},
                       {"heldout_speedup", c->heldout.value("speedup", 0.0)},
                       {"heldout_psnr", c->heldout.value("psnr", 0.0)},
                       {"resolved_manifest", gates::to_json(c->m)}};
      break;
    }
    if (tiers[bucket].is_null()) {
      // Why not: the configuration, the nearest miss, and what the budget left ungated.
      if (!official) notes.push_back("reduced configuration: the official-config gate rejects every candidate");
      const Candidate* nearest = nullptr;
      for (const auto& c : cands)
        if (!c.val.is_null() && !c.accepted() && c.speedup() > 0 && (!nearest || c.speedup() > nearest->speedup())) nearest = &c;
      if (nearest) {
        std::string failed;
        const json nearest_gates = nearest->val.value("gates", json::object());
        for (const auto& [g, x] : nearest_gates.items())
          if (!x.value("pass", false)) failed += (failed.empty() ? "" : ", ") + g;
        notes.push_back("nearest miss: " + nearest->m.id + " at " + num_text(nearest->speedup()) + "x, worst PSNR " +
                        quality_text(nearest->psnr(), true) + ", failed " + failed);
      }
      const Candidate* fastest = nullptr;
      for (const auto& c : cands)
        if (c.accepted() && (!fastest || c.speedup() > fastest->speedup())) fastest = &c;
      if (pool.empty()) notes.push_back(fastest ? "fastest accepted candidate: " + fastest->m.id + " at " + num_text(fastest->speedup()) + "x"
                                                : std::string("no candidate was accepted"));
      int ungated = 0, ungated_comp = 0;
      for (const auto& c : cands)
        if (c.val.is_null()) ++ungated, ungated_comp += c.m.family == "composite";
      if (ungated)
        notes.push_back(std::to_string(ungated) + " candidate(s) never gated" + (ungated_comp ? " (" + std::to_string(ungated_comp) + " compositions)" : "") +
                        ": " + not_gated.begin()->second);
    }
    tier_notes[bucket] = notes;
  }
  progress.clear();

  // 6. The report.
  const auto& bi = runtime::build_info();
  std::string command_line;
  for (const auto& a : req.command_line) command_line += (command_line.empty() ? "" : " ") + a;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string base_dir = "gates/" + slug(base.id) + "/" + req.split;
  json baseline = {{"manifest", base.id}, {"seconds", base_seconds}, {"gate_run", base_dir}};
  if (base_verdict.is_object()) {
    const json perf = base_verdict.value("gates", json::object()).value("performance", json::object()).value("details", json::object());
    if (perf.contains("baseline")) baseline["timing"] = perf["baseline"];
    baseline["clips"] = clip_links(out, out / base_dir);
  } else {
    baseline["reason"] = not_gated.count({gates::manifest_hash(base), req.split}) ? not_gated[{gates::manifest_hash(base), req.split}] : "not gated";
  }
  json report = {{"schema_version", kReportSchemaVersion},
                 {"model", req.load.model},
                 {"weights", worker.weights_label()},
                 {"device", worker.device().is_cuda() ? "cuda" : "cpu"},
                 {"device_name", runtime::device_name(worker.device())},
                 {"build", gates::Worker::build_id()},
                 {"official_config", official},
                 {"config", gates::to_json(base.config)},
                 {"split", req.split},
                 {"heldout_split", req.heldout_split},
                 {"gate_runs", gate_runs},
                 {"budget", {{"trials", req.budget_trials}, {"minutes", req.budget_minutes}, {"executor_trials", req.executor_trials}}},
                 {"elapsed_s", elapsed},
                 {"device_seconds", {{"devices", 1}, {"total_s", elapsed}, {"gating_s", gating_s}, {"exploration_s", explore_s},
                                     {"kind", worker.device().is_cuda() ? "GPU" : "CPU"}}},
                 {"environment", {{"timestamp", started_at},
                                  {"finished", gates::utc_timestamp()},
                                  {"command_line", command_line},
                                  {"thresholds", {{"min_psnr_db", req.gate.min_psnr}, {"min_ssim", req.gate.min_ssim},
                                                  {"lossless_psnr_db", req.gate.lossless_psnr}, {"min_margin", req.gate.min_margin},
                                                  {"timing_repeats", req.gate.timing_repeats}, {"max_prompts", req.gate.max_prompts}}},
                                  {"build", {{"version", bi.version}, {"commit", bi.commit}, {"flavour", bi.flavour}, {"build_type", bi.build_type},
                                             {"libtorch", bi.libtorch}, {"cuda", bi.cuda}, {"cudnn", bi.cudnn}, {"driver", bi.driver}}}}},
                 {"baseline", baseline},
                 {"tiers", tiers},
                 {"tier_notes", tier_notes},
                 {"executors", executors},
                 {"prompt_categories", categories},
                 {"candidates", json::array()}};
  if (StopSignals::signal()) report["interrupted"] = {{"signal", static_cast<int>(StopSignals::signal())}, {"name", signal_name(StopSignals::signal())}};
  if (!not_gated.empty()) report["budget_note"] = not_gated.begin()->second;
  for (const auto& c : cands) {
    json verdicts = json::object();
    if (c.val.contains("gates"))
      for (const auto& [g, x] : c.val["gates"].items()) verdicts[g] = {{"pass", x.value("pass", false)}, {"reason", x.value("reason", "")}};
    json entry = {{"id", c.m.id},           {"family", c.m.family},   {"speedup", c.speedup()},
                  {"passed_all_but_official_config", c.survived_reduced()},
                  {"psnr", c.psnr()},       {"ssim", c.ssim()},       {"accepted", c.accepted()},
                  {"verdicts", verdicts},   {"flags", c.m.flags},     {"lossless", c.m.lossless},
                  {"gated", !c.val.is_null()}, {"failure_signature", c.get("failure_signature", std::string())},
                  {"parents", c.m.parents}};
    if (c.val.is_null()) {
      const auto it = not_gated.find({c.hash, req.split});
      entry["not_gated_reason"] = it != not_gated.end() ? it->second : "not gated";
    } else {
      const json perf = c.val.value("gates", json::object()).value("performance", json::object()).value("details", json::object());
      if (perf.contains("baseline")) entry["baseline_timing"] = perf["baseline"];
      if (perf.contains("candidate")) entry["candidate_timing"] = perf["candidate"];
      entry["baseline_seconds"] = c.get("baseline_seconds", 0.0);
      entry["candidate_seconds"] = c.get("candidate_seconds", 0.0);
      const fs::path dir = out / "gates" / slug(c.m.id) / req.split;
      entry["gate_run"] = "gates/" + slug(c.m.id) + "/" + req.split;
      entry["quality_by_prompt"] = read_quality(dir);
      entry["clips"] = clip_links(out, dir);
    }
    if (c.heldout.is_object()) {
      json h = {{"accepted", c.heldout.value("accepted", false)}, {"speedup", c.heldout.value("speedup", 0.0)},
                {"psnr", c.heldout.value("psnr", 0.0)},          {"ssim", c.heldout.value("ssim", 0.0)},
                {"failure_signature", c.heldout.value("failure_signature", "")}};
      const fs::path dir = out / "gates" / slug(c.m.id) / req.heldout_split;
      h["quality_by_prompt"] = read_quality(dir);
      entry["heldout"] = h;
    } else if (!c.val.is_null() && c.accepted()) {
      const auto it = not_gated.find({c.hash, req.heldout_split});
      if (it != not_gated.end()) entry["heldout"] = {{"gated", false}, {"reason", it->second}};
    }
    report["candidates"].push_back(entry);
  }
  RunOutcome outcome = judge_run(report, req.fail_if_no_tier);
  report["outcome"] = {{"exit_code", outcome.exit_code}, {"problems", outcome.problems}, {"warnings", outcome.warnings},
                       {"fail_if_no_tier", req.fail_if_no_tier}};
  write_reports(out.string(), report);
  outcome.report_path = (out / "report.json").string();
  return outcome;
}

}  // namespace autooptim::orchestrator
