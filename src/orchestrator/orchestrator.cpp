#include "orchestrator/orchestrator.h"
#include "base/stop_signals.h"
#include "base/json_file.h"
#include "base/strings.h"
#include "base/utc_time.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "base/atomic_file.h"
#include "gates/prompts.h"
#include "base/sha256.h"
#include "orchestrator/deploy_check.h"
#include "orchestrator/report.h"
#include "base/spawn.h"
#include "runtime/techniques/registry.h"
#include "runtime/build_info.h"
#include "runtime/device.h"
#include "base/error.h"
#include "base/remove_tree.h"
#include "base/log.h"
#include "orchestrator/launcher.h"
#include "workers/launcher.h"
#include "workers/protocol.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace autooptim::orchestrator {
namespace {

// The gate environment a worker registered (build, weights hash, device, dtype; gates::gate_environment),
// and whether a ledger row was decided in it: resumed verdicts and cached baselines must match it.
json gate_environment_of(const workers::WorkerInfo& w) {
  if (w.registration.contains("gate_environment") && w.registration["gate_environment"].is_object())
    return w.registration["gate_environment"];
  return {{"build", gates::Worker::build_id()}, {"device", w.device}};
}

bool same_gate_environment(const json& row, const workers::WorkerInfo& w) {
  const json env = gate_environment_of(w);  // a named value: items() of a temporary would dangle
  for (const auto& [k, v] : env.items())
    if (!row.contains(k) || row[k] != v) return false;
  return true;
}

}  // namespace

namespace {

// The tier rule: better quality first, then more speed. Verdicts are ranked by their "psnr" and "speedup"
// (an ungated candidate's null verdict counts as 0 for both).
bool ranks_above(const json& a, const json& b) {
  const auto num = [](const json& v, const char* k) { return v.is_object() ? v.value(k, 0.0) : 0.0; };
  const double pa = num(a, "psnr"), pb = num(b, "psnr");
  return pa != pb ? pa > pb : num(a, "speedup") > num(b, "speedup");
}

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

void write_json(const fs::path& p, const json& j) { base::write_json_file(p.string(), j); }

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

using base::join;

// The run's progress: a live line on a terminal, plain lines in a log file (base/log.h).
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
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

using base::StopSignals;

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
  runtime::SelfSpawn s;
  s.args = args;
  s.env = runtime::environment_with({"AUTOOPTIM_LOG_LEVEL"}, {std::string("AUTOOPTIM_LOG_LEVEL=") + log::level_name(log::level())});
  s.log_file = log_path.string();
  s.header = "autooptim executor " + family + ": starting (" + base::utc_timestamp() + "):";
  for (const auto& a : args) s.header += " " + a;
  s.header += "\n";
  s.what = "an executor";
  return runtime::spawn_self(s);
}


// The quality per prompt of a gate run (its quality.json), {} when there is none.
json read_quality(const fs::path& dir) {
  std::ifstream in(dir / "quality.json");
  if (!in) return json::object();
  try {
    const json q = json::parse(in);
    json out = json::object();
    // The split's prompts at the configuration's seed only: the timed pairs' clips ("pair0:<id>@<seed>") are
    // drawn per gate run, so their means would not compare across candidates (and have no category).
    if (q.contains("clips") && q["clips"].is_object())
      for (const auto& [id, c] : q["clips"].items())
        if (c.is_object() && c.contains("psnr_mean") && id.rfind("pair", 0) != 0)
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
  // A part's technique that another part's leaves idle (attention_backend under hopper_attention,
  // gelu_epilogue under quant.fp8) would fail the engagement check: the composition leaves it out.
  for (const auto& [name, by] : runtime::techniques::superseded(gates::to_runtime_options(m))) {
    const auto* t = runtime::techniques::find(name);
    for (const auto& f : t->flags) m.flags.erase(t->group.empty() ? f.key : t->group);
    m.description += "; " + name + " left out (" + by + " does its work)";
  }
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

int64_t heldout_pending(const std::vector<json>& verdicts, const std::set<std::string>& confirmed) {
  std::set<std::string> winners;
  for (const auto& [bucket, need] : Buckets::all()) {
    const json* win = nullptr;
    for (const auto& v : verdicts)
      if (v.value("accepted", false) && v.value("speedup", 0.0) >= need && (!win || ranks_above(v, *win))) win = &v;
    if (win && !confirmed.count(win->value("manifest_hash", std::string()))) winners.insert(win->value("manifest_hash", std::string()));
  }
  return static_cast<int64_t>(winners.size());
}

double heldout_reserve_s(const std::vector<json>& verdicts, const std::set<std::string>& confirmed, double per_gate_s,
                         int64_t workers) {
  if (per_gate_s <= 0 || workers < 1) return 0.0;
  return 1.25 * per_gate_s * std::ceil(static_cast<double>(heldout_pending(verdicts, confirmed)) / static_cast<double>(workers));
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
    gated += c.value("gated", false) || c.value("screened_out", false);
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

namespace {

// The staged evaluation of one manifest on one split: a screen (stage timing) first where asked, then
// the gate run; both are requests to the workers.
struct Job {
  gates::Manifest m;
  std::string split, phase, hash;
  bool screen = false;     // screen before gating
  json skip_ratio;         // measured by the executor (a step cache), null when unknown
  std::string request;     // id of the request in flight ("" none)
  bool screening = false;  // the request in flight is the screen
  bool done = false;
  json verdict;            // null: not gated (reason in not_gated)
  json screen_result;
  double screen_s = 0, gate_s = 0;
};

std::string cache_root(const RunRequest& req, const fs::path& out) {
  if (!req.baseline_cache.empty()) return req.baseline_cache;
  return (out / "baseline-cache").string();
}

// The key of the baseline's own gate verdict in the cross-run cache.
std::string baseline_key(const workers::WorkerInfo& w, const gates::Manifest& base, const std::string& split,
                         const std::vector<gates::Prompt>& prompts, const gates::GateSettings& gs) {
  json k = {{"weights", w.weights_id}, {"build", w.build}, {"device", w.device}, {"device_name", w.device_name},
            {"dtype", w.registration.value("dtype", "")}, {"manifest", gates::manifest_hash(base)}, {"split", split},
            {"seed", base.config.seed}, {"repeats", gs.timing_repeats}, {"max_prompts", gs.max_prompts}, {"prompts", json::array()}};
  for (const auto& p : prompts) k["prompts"].push_back(p.id + "\n" + p.text);
  return gates::sha256_hex(k.dump()).substr(0, 24);
}

void copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  runtime::remove_tree(to, ec);
  fs::create_directories(to.parent_path());
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

}  // namespace

PlanEstimate estimate_plan(const RunRequest& req, const json& cal, int64_t prompts_in_split) {
  PlanEstimate e;
  e.workers = std::max<int64_t>(1, req.gpus.empty() ? req.workers : static_cast<int64_t>(
                                                                     std::count(req.gpus.begin(), req.gpus.end(), ',') + 1));
  if (req.gpus == "all") e.workers = std::max<int64_t>(1, req.gpu_count);
  e.load_s = cal.value("worker_load_s", 0.0);
  e.clip_s = cal.value("clip_estimate_s", 0.0);
  e.forward_s = cal.value("forward_s", 0.0);
  e.decode_s = cal.value("decode_s", 0.0);
  e.text_s = cal.value("text_s", 0.0);
  const int64_t R = std::max<int64_t>(1, req.gate.timing_repeats);
  const int64_t np = req.gate.max_prompts > 0 ? std::min(req.gate.max_prompts, prompts_in_split) : prompts_in_split;
  // The generations of one gate run (gates::run_gate): warm-ups, interleaved pairs, the remaining
  // candidate and baseline outputs, the audit and the off run with its baseline.
  const int64_t gens = 2 + 2 * R + 2 * std::max<int64_t>(0, np - R) + 3;
  e.gate_s = gens * e.clip_s;
  e.screen_s = (2 * std::max<int64_t>(1, req.screen_forwards) + 4) * e.forward_s + e.text_s;
  e.trial_s = 3 * e.clip_s;  // warm-up, baseline and candidate on one prompt
  e.baseline_gate_s = e.gate_s;
  const double budget_s = req.budget_minutes * 60.0;
  const int64_t families = static_cast<int64_t>(req.families.size());
  // Exploration: each family's trials on about two prompts, sharing the workers, within half the budget.
  e.exploration_s = std::min(families * req.executor_trials * 2.0 * 2.0 * e.clip_s, budget_s * 0.5 * e.workers);
  const double left = std::max(0.0, budget_s * e.workers - e.load_s * e.workers - e.baseline_gate_s - e.exploration_s);
  const int64_t candidates = std::max<int64_t>(0, req.budget_trials - 1);
  e.gates_fit = e.gate_s + e.screen_s > 0 ? std::min<int64_t>(candidates, static_cast<int64_t>(left / (e.gate_s + e.screen_s))) : candidates;
  e.gating_s = e.gates_fit * (e.gate_s + e.screen_s);
  e.total_device_s = e.load_s * e.workers + e.baseline_gate_s + e.exploration_s + e.gating_s;
  e.wall_s = e.total_device_s / e.workers;
  // The least that gates one candidate: load, the baseline's gate, one trial (the exploration gets half
  // of the budget, so that half must hold the load, the baseline gate and the trial), a screen and a gate.
  const double first_half = e.load_s + e.baseline_gate_s + e.trial_s;
  e.min_budget_s = std::max(2.0 * first_half, first_half + e.screen_s + e.gate_s);
  e.enough = true;
  if (req.budget_trials < 2) {
    e.enough = false;
    e.why = "--budget-trials " + std::to_string(req.budget_trials) + " holds only the baseline's own gate run; one candidate needs 2";
  } else if (budget_s < e.min_budget_s) {
    e.enough = false;
    e.why = "--budget-minutes " + num_text(req.budget_minutes) + " cannot gate one candidate: that needs about " +
            num_text(e.min_budget_s / 60.0) + " minutes (model load " + num_text(e.load_s) + " s, baseline gate " +
            num_text(e.baseline_gate_s) + " s, one executor trial " + num_text(e.trial_s) + " s, one screen " + num_text(e.screen_s) +
            " s, one candidate gate " + num_text(e.gate_s) + " s; the exploration gets half of the budget)";
  }
  return e;
}

namespace {

// The deploy check of every tier (docs/deploy.md): its manifest through `generate --manifest`, as a user
// deploys it, against the baseline through the same path. A tier that does not reproduce is not delivered:
// it leaves `tiers` for a note. One check per distinct manifest; `not_run` says why none ran (empty: run).
json check_deploys(json& tiers, json& tier_notes, const DeploySetup& setup, const fs::path& out, const std::string& split,
                   const std::string& not_run, Progress& progress) {
  std::map<std::string, json> by_hash;
  json checks = json::array();
  for (const auto& [bucket, need] : Buckets::all()) {
    json& t = tiers[bucket];
    if (t.is_null()) continue;
    const gates::Manifest m = gates::parse_manifest(t["resolved_manifest"], "the " + bucket + " tier");
    const std::string hash = gates::manifest_hash(m);
    if (!by_hash.count(hash)) {
      DeployResult r;
      if (!not_run.empty() || (setup.stop && setup.stop())) {
        r.not_run = not_run.empty() ? "interrupted" : not_run;
      } else {
        DeploySetup s = setup;
        s.dir = (out / "deploy" / slug(m.id)).string();
        progress.line("deploy check of " + m.id + ": generate --manifest against the baseline, " + std::to_string(s.pairs) + " pairs");
        r = deploy_check(s, m, expectation_from_gate_dir((out / "gates" / slug(m.id) / split).string(), s.prompt.id));
      }
      by_hash[hash] = r.to_json();
      checks.push_back({{"manifest", m.id}, {"result", by_hash[hash]}});
    }
    t["deploy"] = by_hash[hash];
    if (!deliverable(t["deploy"], need)) {
      tier_notes[bucket].push_back(m.id + " won the tier in its gate runs but " + deploy_summary(t["deploy"]) + ": not delivered");
      t = nullptr;
    } else if (t["deploy"].value("ran", false) && !t["deploy"].value("reproduced", false)) {
      tier_notes[bucket].push_back(m.id + " is slower through generate than in its gate (" + t["deploy"].value("reason", std::string()) +
                                   "); it still holds " + bucket + " through the deploy path");
    }
  }
  return checks;
}

// Starts the workers (on this host or as Slurm tasks), waits for one to be ready. Throws Error with the reason a worker gave
// when none could start.
workers::WorkerInfo start_workers(Launcher& launcher, workers::Client& client, Progress& progress, double timeout_s = 0) {
  launcher.start();
  const auto t0 = Clock::now();
  while (true) {
    for (const auto& w : client.workers())
      if (w.state == "ready") return w;
    launcher.check();
    if (launcher.all_gone()) {
      std::string why;
      for (const auto& w : client.workers())
        if (w.state == "failed") why = w.registration.value("error", "");
      if (why.empty() && !launcher.worker_ids().empty()) why = launcher.last_log_line(launcher.worker_ids().front());
      throw Error("no worker could load the model: " + why);
    }
    // A cluster's queue may hold the workers back: waiting is bounded (timeout_s > 0).
    if (timeout_s > 0 && std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s)
      throw Error("no worker was ready after " + num_text(timeout_s) + " s: " + launcher.describe().dump());
    if (StopSignals::signal()) throw Error(std::string("interrupted by ") + signal_name(StopSignals::signal()) + " while the workers loaded the model");
    progress.show("loading", 0, 0, 1.0, "workers loading the model");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

RunOutcome run(const RunRequest& req) {
  // Everything that can be checked is checked before the run folder is touched: a failed start
  // must leave nothing that makes the corrected retry look like a second run.
  validate(req);
  const auto start = Clock::now();
  const std::string started_at = base::utc_timestamp();
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
  base.config = gates::with_sizes(base.config, req.frames, req.steps, req.height, req.width);
  base = gates::parse_manifest(gates::to_json(base), "baseline with the run's configuration");
  const bool official = base.config == gates::official_config(base.model);
  // The prompts, held-out ones included (their pin is checked here, not at the first tier candidate).
  const auto all_prompts = gates::load_prompts(req.prompts_dir, true);
  if (all_prompts.split(req.split).empty()) throw Error("--split '" + req.split + "' holds no prompts in " + req.prompts_dir);
  if (all_prompts.split(req.heldout_split).empty())
    throw Error("--heldout-split '" + req.heldout_split + "' holds no prompts in " + req.prompts_dir);
  const auto visible = gates::load_prompts(req.prompts_dir, false);
  if (!req.load.weights_dir.empty()) runtime::read_checkpoint_configs(req.load.weights_dir);  // a broken folder, before any process starts
  const bool slurm = req.launcher == "slurm";
  if (slurm && req.plan) throw Error("--plan calibrates on this host's device: run it without --launcher slurm, on a node like the workers'");
  // Slurm's tasks get their devices from Slurm; local slots need this host's.
  const auto slots = slurm ? std::vector<workers::WorkerSlot>{} : workers::plan_slots(req.gpus, req.workers, req.gpu_count, req.cpu_cores);
  const StopSignals signals;

  if (req.plan) {
    // A private folder for one worker: --plan spends nothing of the run and writes nothing under --out.
    std::string tmpl = (fs::temp_directory_path() / "autooptim-plan-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw Error("--plan: cannot make a temporary folder");
    struct Cleanup {
      std::string dir;
      ~Cleanup() {
        std::error_code ec;
        runtime::remove_tree(dir, ec);
      }
    } cleanup{tmpl};
    LocalWorkers launcher(tmpl, req.model_cli, {slots.front()}, 0);
    workers::ClientOptions co;
    co.no_worker_s = 5;
    workers::Client client(tmpl, "plan", co);
    progress.line("--plan: calibrating " + req.load.model + " on one worker (one forward, one decode)");
    start_workers(launcher, client, progress);
    const json cal = client.call({{"kind", "calibrate"}, {"model", base.model}, {"base", gates::to_json(base)}}, [&] { launcher.check(); })["result"];
    launcher.stop(10);
    progress.clear();
    int64_t np = static_cast<int64_t>(all_prompts.split(req.split).size());
    const PlanEstimate e = estimate_plan(req, cal, np);
    const json plan = {{"model", req.load.model}, {"config", gates::to_json(base.config)}, {"official_config", official},
                       {"workers", e.workers}, {"calibration", cal},
                       {"estimate", {{"load_s", e.load_s}, {"clip_s", e.clip_s}, {"gate_s", e.gate_s}, {"screen_s", e.screen_s},
                                     {"trial_s", e.trial_s}, {"baseline_gate_s", e.baseline_gate_s}, {"exploration_s", e.exploration_s},
                                     {"gating_s", e.gating_s}, {"candidate_gates", e.gates_fit}, {"total_device_s", e.total_device_s},
                                     {"wall_s", e.wall_s}, {"min_budget_s", e.min_budget_s}}},
                       {"budget", {{"minutes", req.budget_minutes}, {"trials", req.budget_trials}, {"executor_trials", req.executor_trials}}},
                       {"enough", e.enough}, {"reason", e.why}};
    std::printf("plan for %s at %lldx%lld, %lld frames, %lld steps%s on %lld worker(s)\n", req.load.model.c_str(),
                static_cast<long long>(base.config.width), static_cast<long long>(base.config.height), static_cast<long long>(base.config.frames),
                static_cast<long long>(base.config.steps), official ? " (official configuration)" : " (reduced configuration)",
                static_cast<long long>(e.workers));
    std::printf("  calibration: forward %.3f s, decode %.3f s, text %.3f s, model load %.1f s -> one clip about %.1f s\n", e.forward_s,
                e.decode_s, e.text_s, e.load_s, e.clip_s);
    std::printf("  one gate run about %.1f s, one screen %.1f s, one executor trial %.1f s\n", e.gate_s, e.screen_s, e.trial_s);
    std::printf("  estimated device time: %.0f s (baseline gate %.0f, exploration %.0f, %lld candidate gates %.0f); wall about %.1f min\n",
                e.total_device_s, e.baseline_gate_s, e.exploration_s, static_cast<long long>(e.gates_fit), e.gating_s, e.wall_s / 60.0);
    std::printf("  budget: %s minutes, %lld gate runs; the least that gates one candidate: %.1f minutes\n", num_text(req.budget_minutes).c_str(),
                static_cast<long long>(req.budget_trials), e.min_budget_s / 60.0);
    // The figures as JSON for scripts: in OUT/plan.json when --out is given, never on the terminal.
    if (req.out_dir != "(plan)") {
      fs::create_directories(req.out_dir);
      write_json(fs::path(req.out_dir) / "plan.json", plan);
      std::printf("  the plan as JSON: %s\n", (fs::path(req.out_dir) / "plan.json").c_str());
    }
    RunOutcome o;
    if (!e.enough) {
      o.exit_code = 2;
      o.problems.push_back("the budget cannot gate one candidate: " + e.why);
    }
    return o;
  }

  // One run per folder at a time: a second `run` or `--resume` beside a live one would gate the same
  // candidates twice and interleave their ledger rows.
  const bool created_out = !fs::exists(out);
  std::set<std::string> before;  // what the folder held, so a failed start removes only what it added
  if (!created_out)
    for (const auto& e : fs::directory_iterator(out)) before.insert(e.path().filename().string());
  fs::create_directories(out);
  std::optional<gates::FolderLock> lock;
  std::unique_ptr<Launcher> launcher;
  std::optional<workers::Client> client_slot;
  workers::WorkerInfo first_worker;
  const fs::path base_path = out / "manifests" / req.load.model / "baseline.json";
  const fs::path visible_path = out / "prompts-visible.jsonl";
  try {
    lock.emplace((out / "run.lock").string(), "--out folder " + out.string());
    if (!req.resume && fs::exists(out / "ledger.jsonl") && fs::file_size(out / "ledger.jsonl") > 0)
      throw Error(out.string() + ": already holds a run (ledger.jsonl); use --resume to continue it or choose another --out");
    fs::create_directories(out / "manifests" / req.load.model);
    write_json(base_path, gates::to_json(base));
    // Executors see the visible prompts only: a file of their own.
    std::string text;
    for (const auto& p : visible.all())
      text += json{{"id", p.id}, {"category", p.category}, {"prompt", p.text}, {"splits", p.splits}}.dump() + "\n";
    gates::write_file_atomic(visible_path.string(), text);
    progress.line("starting " + std::to_string(slurm ? req.workers : static_cast<int64_t>(slots.size())) + " worker(s)" +
                  (slurm ? " as a Slurm job array" : "") + ": each loads " + req.load.model + " once and serves every trial and gate run");
    // Requests left by an interrupted run were for processes that are gone. So were its workers: their
    // registrations and claimed requests move aside (workers.previous/, for a post-mortem), or a new worker of
    // the same id would run the dead run's claim and the janitor would take the new worker for the dead one
    // (issue 38: --resume after kill -9 exited 2, "the baseline was not measured").
    for (const char* d : {"queue", "responses", "cancel"}) runtime::remove_tree(out / d);
    if (fs::exists(out / "workers")) {
      runtime::remove_tree(out / "workers.previous");
      std::error_code ec;
      fs::rename(out / "workers", out / "workers.previous", ec);
      if (ec) runtime::remove_tree(out / "workers");
    }
    workers::ClientOptions co;
    co.dead_after_s = req.worker_dead_after_s;
    co.no_worker_s = 60;
    if (slurm) {
      SlurmOptions so;
      so.run_dir = fs::absolute(out).string();
      so.model_cli = req.model_cli;
      so.workers = req.workers;
      so.partition = req.slurm_partition;
      so.gpus_per_worker = req.gpus_per_worker;
      so.cpus_per_worker = req.cpus_per_worker;
      so.time_limit = req.slurm_time;
      so.sbatch_args = req.sbatch_args;
      launcher = std::make_unique<SlurmLauncher>(so);
      // A pre-empted worker's replacement may wait in the queue: clients wait that long for one.
      co.no_worker_s = std::max(co.no_worker_s, req.slurm_start_timeout_s);
    } else {
      launcher = std::make_unique<LocalWorkers>(out.string(), req.model_cli, slots, 2);
    }
    client_slot.emplace(out.string(), "orchestrator", co);
    first_worker = start_workers(*launcher, *client_slot, progress, slurm ? req.slurm_start_timeout_s : 0);
  } catch (...) {
    // Nothing of the run was written yet: remove what this call added (the lock file last).
    if (launcher) launcher->stop(5);
    launcher.reset();
    lock.reset();
    std::error_code ec;
    if (created_out) {
      runtime::remove_tree(out, ec);
    } else {
      for (const auto& e : fs::directory_iterator(out, ec))
        if (!before.count(e.path().filename().string())) runtime::remove_tree(e.path(), ec);
    }
    throw;
  }
  workers::Client& client = *client_slot;

  fs::create_directories(out / "outbox");
  fs::create_directories(out / "gates");
  gates::Ledger ledger((out / "ledger.jsonl").string());
  // Prompt id -> category, for the report's per-category quality (held-out ids resolved by the gate's own files).
  json categories = json::object();
  const auto every_prompt = gates::load_prompts(req.prompts_dir, true);
  // The visible prompts' words too, for the report's clips (held-out texts stay out of every report).
  json prompt_texts = json::object();
  for (const auto& p : every_prompt.all()) {
    categories[p.id] = p.category;
    if (!p.splits.empty() && contains(gates::visible_splits(), p.splits.front())) prompt_texts[p.id] = p.text;
  }

  // Verdicts already in the ledger (resume): manifest hash + split -> row, when decided in this
  // environment (build, weights, device, dtype).
  std::map<std::pair<std::string, std::string>, json> done;
  for (const auto& row : ledger.read_all())
    if (row.contains("manifest_hash") && row.contains("split") && same_gate_environment(row, first_worker))
      done[{row["manifest_hash"].get<std::string>(), row["split"].get<std::string>()}] = row;

  gates::GateSettings gs = req.gate;
  gs.prompts_dir = fs::absolute(req.prompts_dir).string();
  gs.baseline_config = base.config;  // the pinned baseline at this run's configuration
  const std::string cache = fs::absolute(cache_root(req, out)).string();
  gs.cache_dir = (fs::path(cache) / "outputs").string();
  if (first_worker.device == "cuda") gs.exact_off_identity = false;
  json gate_settings = gates::settings_to_json(gs);
  gate_settings["baseline_manifest"] = gates::to_json(base);  // the worker reads the baseline's config from it
  // A tier's held-out confirmation covers the held-out split it names (--heldout-max-prompts, default all).
  // How many prompts a gate judges on the split and on the held-out split (max_prompts, heldout_max_prompts).
  const auto judged = [](int64_t all, int64_t max) { return max > 0 ? std::min(max, all) : all; };
  const int64_t split_all = static_cast<int64_t>(all_prompts.split(req.split).size());
  const int64_t heldout_all = static_cast<int64_t>(all_prompts.split(req.heldout_split).size());
  const int64_t split_used = judged(split_all, gs.max_prompts), heldout_used = judged(heldout_all, req.heldout_max_prompts);
  auto settings_for = [&](const std::string& split) {
    json s = gate_settings;
    if (contains(gates::heldout_splits(), split)) s["max_prompts"] = req.heldout_max_prompts;
    return s;
  };
  const double screen_min = req.screen_min_speedup >= 0 ? req.screen_min_speedup : (official ? Buckets::all().front().second : 0.0);

  int64_t gate_runs = 0, screens = 0, screened_out = 0;
  double best = 1.0, gating_s = 0, screening_s = 0;
  std::map<std::pair<std::string, std::string>, std::string> not_gated;  // why a manifest got no verdict
  std::map<std::string, json> screen_of;                                 // manifest hash -> screen result
  std::map<std::string, std::pair<double, double>> device_s_of;          // manifest hash -> (screen_s, gate_s)
  std::vector<std::string> worker_events;                                // deaths and restarts
  // Time kept back for the held-out checks: a tier needs its candidate confirmed on the held-out split,
  // so while the gate and compose phases run, each current tier winner without a held-out verdict keeps
  // one gate run's worth of the budget (the mean gate run so far, with a quarter for noise). Without it a
  // short budget spends itself on candidates that cannot win and leaves the accepted one unconfirmed.
  // The same for the gate-run budget (--budget-trials): each such winner keeps one gate run.
  int64_t gates_finished = 0;
  auto tier_verdicts = [&] {
    std::pair<std::vector<json>, std::set<std::string>> vc;  // verdicts on the split, hashes confirmed held out
    for (const auto& [key, v] : done) {
      if (key.first.empty()) continue;
      if (key.second == req.split) vc.first.push_back(v);
      if (key.second == req.heldout_split) vc.second.insert(key.first);
    }
    return vc;
  };
  // A held-out gate runs more prompts than a gate on the split (the whole held-out split by default): the
  // reserve prices it by its generations (warm-ups, timed pairs, audit, off run, each prompt's candidate and
  // baseline clips) against a split gate's.
  auto heldout_cost_ratio = [&] {
    const auto runs = [&](int64_t np) { return 2.0 + 2.0 * gs.timing_repeats + 3.0 + 2.0 * static_cast<double>(np) - 1.0; };
    return std::max(1.0, runs(heldout_used) / runs(split_used));
  };
  auto reserve_s = [&](int64_t workers) {
    if (gates_finished == 0) return 0.0;
    const auto [verdicts, confirmed] = tier_verdicts();
    return heldout_reserve_s(verdicts, confirmed, heldout_cost_ratio() * gating_s / static_cast<double>(gates_finished), workers);
  };
  auto reserve_runs = [&] {
    const auto [verdicts, confirmed] = tier_verdicts();
    return heldout_pending(verdicts, confirmed);
  };
  auto keep_workers = [&] {
    if (StopSignals::signal()) launcher->no_restarts();
    for (const auto& id : launcher->check()) {
      worker_events.push_back(base::utc_timestamp() + ": worker " + id + " died (" + launcher->last_log_line(id) +
                              "); its requests were re-queued and it was restarted if it could be");
      progress.warn("worker " + id + " died; its requests were re-queued");
    }
  };
  auto stage_line = [&] {
    std::string s;
    for (const auto& w : client.workers())
      if (w.heartbeat.is_object() && w.heartbeat.value("request", json()).is_string())
        s += (s.empty() ? "" : "; ") + w.id + ": " + w.heartbeat.value("stage", "");
    return s;
  };

  // Runs jobs through the workers: at most one request in flight per worker, so the budget is checked
  // as each gate starts; screens first where asked; verdicts as gate() returned them before.
  auto run_jobs = [&](std::vector<Job>& jobs) {
    for (auto& j : jobs) {
      j.hash = gates::manifest_hash(j.m);
      if (auto it = done.find({j.hash, j.split}); it != done.end()) j.verdict = it->second, j.done = true;
    }
    auto finish_gate = [&](Job& j, const json& r) {
      json v;
      if (r.value("ok", false)) {
        v = r["result"];
      } else {
        // A candidate that cannot even run is rejected with the reason; the run goes on.
        v = {{"manifest", j.m.id}, {"manifest_hash", j.hash}, {"split", j.split}, {"accepted", false}, {"speedup", 0.0}, {"psnr", 0.0},
             {"ssim", 0.0}, {"failure_signature", "could-not-run"},
             {"gates", {{"artifacts", {{"pass", false}, {"reason", r.value("error", std::string("?"))}}}}}};
        json row = v;
        row["build"] = gates::Worker::build_id();
        ledger.append(row);
      }
      v["out_dir"] = (out / "gates" / slug(j.m.id) / j.split).string();
      v["worker"] = r.value("worker", "");
      j.verdict = v;
      j.done = true;
      done[{j.hash, j.split}] = v;
      if (v.value("accepted", false)) best = std::max(best, v.value("speedup", 0.0));
      std::string failed;
      const json verdict_gates = v.value("gates", json::object());
      for (const auto& [g, x] : verdict_gates.items())
        if (!x.value("pass", false) && failed.empty()) failed = g + ": " + x.value("reason", "");
      if (j.m.kind == "baseline" && r.value("ok", false)) {
        // Its own gate measures the denominator; "not faster than itself" is no rejection.
        progress.line("baseline measured on " + j.split + " (" + r.value("worker", "?") + "): " + num_text(v.value("baseline_seconds", 0.0)) +
                      " s per clip");
        return;
      }
      progress.line("gate " + j.m.id + " on " + j.split + " (" + r.value("worker", "?") + "): " +
                    (v.value("accepted", false) ? "ACCEPTED " : "rejected ") + num_text(v.value("speedup", 0.0)) + "x, worst PSNR " +
                    quality_text(v.value("psnr", 0.0), true) + (failed.empty() ? "" : " (" + failed + ")"));
    };
    auto last_janitor = Clock::now();
    while (true) {
      int64_t in_flight = 0, alive = 0;
      for (const auto& j : jobs) in_flight += !j.request.empty();
      for (const auto& w : client.workers()) alive += w.state == "ready" || w.state == "loading";
      const int64_t capacity = std::max<int64_t>(1, alive);
      bool pending = false;
      for (auto& j : jobs) {
        if (j.done || !j.request.empty()) continue;
        pending = true;
        if (in_flight >= capacity) continue;
        std::string why;
        if (StopSignals::signal()) why = std::string("interrupted by ") + signal_name(StopSignals::signal()) + " before its gate run";
        else if (gate_runs >= req.budget_trials) why = "gate-run budget spent (" + std::to_string(req.budget_trials) + " of --budget-trials)";
        else if (j.phase != "heldout" && j.phase != "baseline" && gate_runs + reserve_runs() >= req.budget_trials)
          why = "gate-run budget spent (" + std::to_string(req.budget_trials) + " of --budget-trials; the rest, " +
                std::to_string(req.budget_trials - gate_runs) + ", is kept for the held-out checks of the tier candidates)";
        else if (progress.left_s() <= 0) why = "time budget spent (--budget-minutes " + num_text(req.budget_minutes) + ")";
        else if (j.phase != "heldout" && j.phase != "baseline" && progress.left_s() <= reserve_s(capacity))
          why = "time budget spent (--budget-minutes " + num_text(req.budget_minutes) + "; the rest, " + num_text(progress.left_s()) +
                " s, is kept for the held-out checks of the tier candidates)";
        if (!why.empty()) {
          not_gated[{j.hash, j.split}] = why;
          j.done = true;
          continue;
        }
        if (j.screen && j.screen_result.is_null()) {
          ++screens;
          j.screening = true;
          j.request = client.submit({{"kind", "screen"}, {"model", j.m.model}, {"base", gates::to_json(base)}, {"manifest", gates::to_json(j.m)},
                                     {"forwards", req.screen_forwards}, {"skip_ratio", j.skip_ratio}});
        } else {
          ++gate_runs;
          j.screening = false;
          j.request = client.submit({{"kind", "gate"}, {"model", j.m.model}, {"manifest", gates::to_json(j.m)}, {"split", j.split},
                                     {"out_dir", fs::absolute(out / "gates" / slug(j.m.id) / j.split).string()}, {"settings", settings_for(j.split)},
                                     {"ledger", fs::absolute(out / "ledger.jsonl").string()}});
          progress.line("gate " + j.m.id + " on " + j.split + ": queued (" + j.phase + ")");
        }
        ++in_flight;
      }
      if (!pending && in_flight == 0) break;
      for (auto& j : jobs) {
        if (j.request.empty()) continue;
        const auto r = client.poll(j.request);
        if (!r) continue;
        j.request.clear();
        const double busy = r->value("busy_s", 0.0);
        if (r->value("cancelled", false)) {
          not_gated[{j.hash, j.split}] = std::string("interrupted by ") + signal_name(StopSignals::signal()) + " during its gate run";
          j.done = true;
          continue;
        }
        if (j.screening) {
          j.screen_s += busy;
          screening_s += busy;
          device_s_of[j.hash].first += busy;
          if (!r->value("ok", false)) {
            // A screen that failed decides nothing: the gate will say why the candidate cannot run.
            j.screen_result = {{"error", r->value("error", std::string("?"))}};
          } else {
            j.screen_result = (*r)["result"];
          }
          j.screen_result["min_speedup"] = screen_min;
          j.screen_result["slack"] = req.screen_slack;
          const json est = j.screen_result.value("estimated_speedup", json());
          const bool drop = est.is_number() && est.get<double>() * (1.0 + req.screen_slack) < screen_min;
          j.screen_result["dropped"] = drop;
          screen_of[j.hash] = j.screen_result;
          if (drop) {
            ++screened_out;
            not_gated[{j.hash, j.split}] = "screened out by stage timing: estimated at most " + num_text(est.get<double>()) +
                                           "x (with " + num_text(100 * req.screen_slack) + "% for noise), below the smallest tier's " +
                                           num_text(screen_min) + "x; no full clip was spent on it";
            progress.line("screen " + j.m.id + ": dropped (estimated " + num_text(est.get<double>()) + "x < " + num_text(screen_min) + "x)");
            j.done = true;
          } else {
            progress.line("screen " + j.m.id + ": " + (est.is_number() ? "estimated " + num_text(est.get<double>()) + "x" : std::string("not bounded")) +
                          ", gated");
          }
          continue;
        }
        j.gate_s += busy;
        gating_s += busy;
        ++gates_finished;
        device_s_of[j.hash].second += busy;
        finish_gate(j, *r);
      }
      if (StopSignals::signal()) {
        // Interrupted: the requests in flight are withdrawn and nobody waits for their answers.
        launcher->no_restarts();
        for (auto& j : jobs)
          if (!j.request.empty()) {
            client.cancel(j.request);
            j.request.clear();
            not_gated[{j.hash, j.split}] = std::string("interrupted by ") + signal_name(StopSignals::signal()) + " during its gate run";
            j.done = true;
          }
      }
      if (std::chrono::duration<double>(Clock::now() - last_janitor).count() > 1.0) {
        last_janitor = Clock::now();
        client.requeue_dead();
        keep_workers();
        if (launcher->all_gone())
          for (auto& j : jobs)
            if (!j.done) {
              not_gated[{j.hash, j.split}] = "every worker died (" + launcher->last_log_line(launcher->worker_ids().front()) + ")";
              j.request.clear();
              j.done = true;
            }
      }
      progress.show(jobs.front().phase, gate_runs, req.budget_trials, best, stage_line());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  auto gate = [&](const gates::Manifest& m, const std::string& split, const std::string& ph) -> json {
    std::vector<Job> jobs(1);
    jobs[0].m = m;
    jobs[0].split = split;
    jobs[0].phase = ph;
    run_jobs(jobs);
    return jobs[0].verdict;
  };

  // 1. The baseline against itself: its time is the denominator, and it fills the output cache. Its
  // verdict and clips come from the cross-run cache when this weights/build/device/config/prompts/seed
  // gated it before.
  progress.line("baseline: " + base.id + (official ? " (official configuration)" : " (REDUCED configuration: no tier can be won)"));
  auto split_prompts = all_prompts.split(req.split);
  if (gs.max_prompts > 0 && static_cast<int64_t>(split_prompts.size()) > gs.max_prompts) split_prompts.resize(static_cast<size_t>(gs.max_prompts));
  const std::string bkey = baseline_key(first_worker, base, req.split, split_prompts, gs);
  const fs::path bcache = fs::path(cache) / "baselines" / bkey;
  const fs::path base_dir_abs = out / "gates" / slug(base.id) / req.split;
  json base_verdict;
  bool baseline_cached = false;
  if (!done.count({gates::manifest_hash(base), req.split})) {
    if (auto cached = workers::read_json_file((bcache / "verdict.json").string()); cached && fs::is_directory(bcache / "gate")) {
      copy_tree(bcache / "gate", base_dir_abs);
      json v = *cached;
      v["cached_from"] = bcache.string();
      v["out_dir"] = base_dir_abs.string();
      json row = v;
      const json env = gate_environment_of(first_worker);
      for (const auto& [k, val] : env.items()) row[k] = val;
      ledger.append(row);
      done[{gates::manifest_hash(base), req.split}] = v;
      baseline_cached = true;
      progress.line("baseline: verdict and clips reused from the cache (" + bcache.string() + ")");
    }
  }
  base_verdict = gate(base, req.split, "baseline");
  const double base_seconds = base_verdict.is_object() ? base_verdict.value("baseline_seconds", 0.0) : 0.0;
  if (!baseline_cached && base_verdict.is_object() && !base_verdict.contains("cached_from") && base_seconds > 0 &&
      fs::is_directory(base_dir_abs)) {
    try {
      const fs::path tmp = bcache.string() + ".tmp" + std::to_string(getpid());
      copy_tree(base_dir_abs, tmp / "gate");
      json v = base_verdict;
      v.erase("out_dir");
      v["cached_at"] = base::utc_timestamp();
      v["cache_key"] = bkey;
      gates::write_file_atomic((tmp / "verdict.json").string(), v.dump(2) + "\n");
      std::error_code ec;
      runtime::remove_tree(bcache, ec);
      fs::rename(tmp, bcache);
    } catch (const std::exception& e) {
      progress.warn(std::string("the baseline could not be cached for later runs: ") + e.what());
    }
  }

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
                                                  "--serve", fs::absolute(out).string()})
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
  long executors_rss_kb = 0;
  auto last_check = Clock::now();
  while (!running.empty()) {
    int status = 0;
    pid_t pid = 0;
    for (const auto& [p, fam] : running) {
      struct rusage ru {};
      if (wait4(p, &status, WNOHANG, &ru) == p) {
        pid = p;
        executors_rss_kb = std::max(executors_rss_kb, ru.ru_maxrss);
        break;
      }
    }
    if (std::chrono::duration<double>(Clock::now() - last_check).count() > 1.0) {
      last_check = Clock::now();
      client.requeue_dead();
      keep_workers();
    }
    if (pid > 0 && running.count(pid)) {
      const std::string fam = running[pid];
      running.erase(pid);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      const std::string code = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                                 : std::string("signal ") + std::to_string(WTERMSIG(status));
      if (!ok) {
        const std::string why = code + ", see outbox/" + fam + ".log: " + runtime::last_log_line((out / "outbox" / (fam + ".log")).string());
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
    progress.show(stopped_at ? "stopping" : "explore", gate_runs, req.budget_trials, best, stage_line());
    std::this_thread::sleep_for(std::chrono::milliseconds(stopped_at ? 100 : 300));
  }
  const double explore_s = std::chrono::duration<double>(Clock::now() - explore_start).count();
  // Requests of executors that were killed are withdrawn (a worker would otherwise still run them).
  for (const auto& fam : req.families) workers::cancel_client_requests(out.string(), "executor-" + fam);
  for (auto& e : executors) e["explored"] = explored(out / "outbox" / e.value("family", ""));

  // 3. Collect, de-duplicate by manifest hash, gate on the visible split.
  std::vector<Candidate> cands;
  std::set<std::string> seen = {gates::manifest_hash(base)};
  std::vector<fs::path> files;
  for (const auto& fam : req.families) {
    const fs::path box = out / "outbox" / fam;
    if (!fs::is_directory(box)) continue;
    // In the executor's order (outbox/<family>/proposals.txt, best first); files it does not list (an
    // older outbox) after them, by name.
    std::map<std::string, size_t> position;
    {
      std::ifstream in(box / "proposals.txt");
      std::string line;
      while (std::getline(in, line))
        if (!line.empty()) position.emplace(line, position.size());
    }
    std::vector<fs::path> mine;
    for (const auto& e : fs::directory_iterator(box))
      if (e.path().extension() == ".json" && e.path().filename().string().rfind(".tmp", 0) != 0) mine.push_back(e.path());
    auto key = [&](const fs::path& f) {
      const auto it = position.find(f.filename().string());
      return std::make_pair(it == position.end() ? position.size() : it->second, f.filename().string());
    };
    std::sort(mine.begin(), mine.end(), [&](const fs::path& a, const fs::path& b) { return key(a) < key(b); });
    files.insert(files.end(), mine.begin(), mine.end());
  }
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
  // Staged: each candidate is screened by stage timing first (a step cache with the skip ratio its
  // executor measured), then gated; the workers take them in parallel.
  auto skip_ratio_of = [&](const gates::Manifest& m) -> json {
    const json want = gates::to_json(m)["flags"];
    for (const auto& e : executors) {
      std::ifstream in(out / "outbox" / e.value("family", "") / "trials.jsonl");
      std::string line;
      while (std::getline(in, line)) {
        try {
          const json t = json::parse(line);
          if (!t.value("skip_ratio", json()).is_number()) continue;
          gates::Manifest tm = base;
          tm.id = base.model + "/trial";
          tm.kind = "patch";
          tm.family = m.family;
          tm.base = base.id;
          tm.flags = t.value("flags", json::object());
          if (gates::to_json(gates::parse_manifest(gates::to_json(tm), "trial"))["flags"] == want) return t["skip_ratio"];
        } catch (const std::exception&) {
        }
      }
    }
    return json();
  };
  auto gate_all = [&](std::vector<Candidate>& cs, const std::string& phase) {
    std::vector<Job> jobs;
    for (const auto& c : cs) {
      Job j;
      j.m = c.m;
      j.split = req.split;
      j.phase = phase;
      j.screen = screen_min > 0;
      if (j.screen) j.skip_ratio = skip_ratio_of(c.m);
      jobs.push_back(std::move(j));
    }
    if (!jobs.empty()) run_jobs(jobs);
    for (size_t k = 0; k < cs.size(); ++k) cs[k].val = jobs[k].verdict;
  };
  // Round robin across families (each family's first proposal, then each one's second, ...), so a budget
  // that ends early has still gated candidates of every family.
  size_t first_round = 0;  // each family's first proposal: cands[0, first_round)
  {
    std::map<std::string, int> rank;
    std::vector<std::pair<std::pair<int, std::string>, size_t>> order;
    for (size_t k = 0; k < cands.size(); ++k) order.push_back({{rank[cands[k].m.family]++, cands[k].m.family}, k});
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Candidate> sorted;
    for (const auto& o : order) sorted.push_back(cands[o.second]), first_round += o.first.first == 0;
    cands = std::move(sorted);
    // At least one candidate per worker in the first round, so that no worker idles while it runs.
    const auto n_workers = static_cast<size_t>(std::max<int64_t>(1, slurm ? req.workers : static_cast<int64_t>(slots.size())));
    first_round = std::min(cands.size(), std::max(first_round, n_workers));
  }
  double gate_wall = 0, compose_wall = 0;
  int64_t gate_phase_runs = 0, compose_runs = 0;
  auto gate_range = [&](size_t from, size_t to) {
    const auto t0 = Clock::now();
    const int64_t before = gate_runs;
    std::vector<Candidate> part(cands.begin() + static_cast<std::ptrdiff_t>(from), cands.begin() + static_cast<std::ptrdiff_t>(to));
    gate_all(part, "gate");
    for (size_t k = 0; k < part.size(); ++k) cands[from + k].val = part[k].val;
    gate_wall += std::chrono::duration<double>(Clock::now() - t0).count();
    gate_phase_runs += gate_runs - before;
  };

  // 4. Compose the best accepted candidate of each family; a composition is gated again. After each
  // family's first proposal (so that a short budget still gates the composition of what was accepted
  // first, which is where the larger tiers come from), then after each step of the rest, with the families'
  // bests then (a composition already gated is not gated again).
  // On a reduced configuration nothing can be accepted (official-config gate); its survivors of every
  // other gate are composed all the same, so the composition step is exercised and reported.
  auto survivor = [official](const Candidate& c) { return official ? c.accepted() : c.survived_reduced(); };
  std::vector<Candidate> composed;
  auto compose_round = [&] {
    std::map<std::string, const Candidate*> best_of;
    for (const auto& c : cands)
      if (survivor(c) && (!best_of.count(c.m.family) || c.speedup() > best_of[c.m.family]->speedup())) best_of[c.m.family] = &c;
    std::vector<std::vector<const Candidate*>> combos;
    std::vector<const Candidate*> fams;
    for (const auto& kv : best_of) fams.push_back(kv.second);
    for (size_t i = 0; i < fams.size(); ++i)
      for (size_t j = i + 1; j < fams.size(); ++j) combos.push_back({fams[i], fams[j]});
    if (fams.size() >= 3) combos.push_back(fams);
    std::vector<Candidate> fresh;
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
      fresh.push_back({m, gates::manifest_hash(m), json(), json()});
    }
    const auto t0 = Clock::now();
    const int64_t before = gate_runs;
    gate_all(fresh, "compose");
    compose_wall += std::chrono::duration<double>(Clock::now() - t0).count();
    compose_runs += gate_runs - before;
    for (auto& c : fresh) composed.push_back(std::move(c));
  };
  gate_range(0, first_round);
  compose_round();
  // The rest, one candidate per worker at a time, composing after each step: a composition of two families'
  // accepted candidates is what reaches the larger tiers, so it is gated as soon as its parts exist, before
  // the rest of the long tail (issue 35: the demo's budget ran out with its composition never gated).
  const size_t step = static_cast<size_t>(std::max<int64_t>(1, slurm ? req.workers : static_cast<int64_t>(slots.size())));
  for (size_t k = first_round; k < cands.size(); k += step) {
    gate_range(k, std::min(cands.size(), k + step));
    compose_round();
  }
  json phases = {{"gate", {{"wall_s", gate_wall}, {"gate_runs", gate_phase_runs}}},
                 {"compose", {{"wall_s", compose_wall}, {"gate_runs", compose_runs}}}};
  for (auto& c : composed) cands.push_back(c);

  // 5. Tiers: per bucket, the accepted candidate with the best quality, confirmed on held-out prompts.
  json tiers = json::object(), tier_notes = json::object();
  for (const auto& [bucket, need] : Buckets::all()) {
    std::vector<Candidate*> pool;
    for (auto& c : cands)
      if (c.accepted() && c.speedup() >= need) pool.push_back(&c);
    std::sort(pool.begin(), pool.end(), [](const Candidate* a, const Candidate* b) { return ranks_above(a->val, b->val); });
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
                       {"resolved_manifest", gates::to_json(c->m)},
                       {"switches", gates::technique_flags_set(c->m)},
                       {"lossless", c->m.lossless},
                       {"psnr_floor", c->m.lossless ? gs.lossless_psnr : gs.min_psnr},
                       {"prompts", split_used},
                       {"split_prompts", split_all},
                       {"heldout_prompts", heldout_used},
                       {"heldout_split_prompts", heldout_all}};
      break;
    }
    if (tiers[bucket].is_null()) {
      // Why not: the configuration, the nearest miss, and what the budget left ungated.
      if (!official) notes.push_back("reduced configuration: the official-config gate rejects every candidate");
      // The nearest miss: a rejected candidate that was fast enough for this bucket (what held it back was
      // not speed); a slower rejected one says nothing about the bucket.
      const Candidate* nearest = nullptr;
      for (const auto& c : cands)
        if (!c.val.is_null() && !c.accepted() && c.speedup() >= need && (!nearest || ranks_above(c.val, nearest->val))) nearest = &c;
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

  // A worker that died after the janitor's last look (the last gate ended first) is still reported.
  launcher->no_restarts();
  keep_workers();
  // The workers leave; their final counters (held time, generating time, peak memory) go in the report.
  launcher->stop(StopSignals::signal() ? 5 : 30);
  // 5b. The deploy check, on the device the first worker had, now that the workers have left it.
  json deploy_checks;
  {
    DeploySetup ds;
    ds.model_cli = req.model_cli;
    ds.cuda_visible = slots.empty() ? "" : slots.front().cuda_visible;
    ds.threads = first_worker.registration.value("threads", int64_t{0});
    ds.baseline = base;
    ds.prompt = split_prompts.front();
    ds.seed = base.config.seed;
    ds.pairs = req.deploy_pairs;
    ds.stop = [] { return StopSignals::signal() != 0; };
    const std::string not_run = !req.deploy_check ? "--no-deploy-check"
                                : slurm ? "the workers ran as Slurm tasks on other hosts: run generate --manifest there"
                                        : "";
    deploy_checks = check_deploys(tiers, tier_notes, ds, out, req.split, not_run, progress);
  }
  json worker_rows = json::array();
  double held_s = 0, generating_s = 0, busy_s = 0;
  long peak_rss_kb = 0;
  int64_t peak_device = 0;
  for (const auto& w : client.workers()) {
    json f = w.registration.value("final", json());
    if (!f.is_object()) f = w.heartbeat.is_object() ? w.heartbeat : json::object();
    const long rss = std::max<long>(f.value("peak_rss_kb", 0L), launcher->exited_max_rss_kb().count(w.id) ? launcher->exited_max_rss_kb().at(w.id) : 0L);
    worker_rows.push_back({{"id", w.id}, {"host", w.host}, {"device", w.device}, {"device_name", w.device_name},
                           {"threads", w.registration.value("threads", 0)},
                           {"blas", gate_environment_of(w).value("blas", "")}, {"load_s", w.registration.value("load_s", 0.0)},
                           {"held_s", f.value("held_s", 0.0)}, {"busy_s", f.value("busy_s", 0.0)}, {"generating_s", f.value("generating_s", 0.0)},
                           {"generations", f.value("generations", 0)}, {"requests", f.value("requests", 0)}, {"peak_rss_kb", rss},
                           {"peak_device_bytes", f.value("peak_device_bytes", int64_t{0})}, {"state", w.state}});
    held_s += f.value("held_s", 0.0);
    generating_s += f.value("generating_s", 0.0);
    busy_s += f.value("busy_s", 0.0);
    peak_rss_kb = std::max(peak_rss_kb, rss);
    peak_device = std::max<int64_t>(peak_device, f.value("peak_device_bytes", int64_t{0}));
  }
  struct rusage self_ru {};
  getrusage(RUSAGE_SELF, &self_ru);

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
    baseline["cached"] = base_verdict.contains("cached_from");
    baseline["cache_key"] = bkey;
    if (base_verdict.contains("cached_from")) baseline["cached_from"] = base_verdict["cached_from"];
  } else {
    baseline["reason"] = not_gated.count({gates::manifest_hash(base), req.split}) ? not_gated[{gates::manifest_hash(base), req.split}] : "not gated";
  }
  json report = {{"schema_version", kReportSchemaVersion},
                 {"model", req.load.model},
                 {"weights", first_worker.weights},
                 {"weights_id", first_worker.weights_id},
                 {"device", first_worker.device},
                 {"device_name", first_worker.device_name},
                 {"build", gates::Worker::build_id()},
                 {"official_config", official},
                 {"config", gates::to_json(base.config)},
                 {"split", req.split},
                 {"split_prompts", split_all},
                 {"heldout_split", req.heldout_split},
                 {"gate_runs", gate_runs},
                 {"budget", {{"trials", req.budget_trials}, {"minutes", req.budget_minutes}, {"executor_trials", req.executor_trials}}},
                 {"elapsed_s", elapsed},
                 {"device_seconds", {{"devices", static_cast<int64_t>(slots.size())}, {"total_s", held_s}, {"wall_s", elapsed},
                                     {"busy_s", busy_s}, {"generating_s", generating_s},
                                     {"generating_share", held_s > 0 ? generating_s / held_s : 0.0},
                                     {"gating_s", gating_s}, {"screening_s", screening_s}, {"exploration_s", explore_s},
                                     {"kind", first_worker.device == "cuda" ? "GPU" : "CPU"}}},
                 {"workers", worker_rows},
                 {"worker_events", worker_events},
                 {"launcher", launcher->describe()},
                 {"phases", phases},
                 {"memory", {{"peak_worker_rss_kb", peak_rss_kb}, {"peak_device_bytes", peak_device},
                             {"executors_peak_rss_kb", executors_rss_kb}, {"orchestrator_peak_rss_kb", self_ru.ru_maxrss},
                             {"models_loaded", static_cast<int64_t>(worker_rows.size())},
                             {"note", "only the workers hold the model; the run's peak is one worker's"}}},
                 {"screening", {{"min_speedup", screen_min}, {"slack", req.screen_slack}, {"forwards", req.screen_forwards},
                                {"screened", screens}, {"dropped", screened_out}}},
                 {"environment", {{"timestamp", started_at},
                                  {"finished", base::utc_timestamp()},
                                  {"command_line", command_line},
                                  {"thresholds", {{"min_psnr_db", req.gate.min_psnr}, {"min_ssim", req.gate.min_ssim},
                                                  {"lossless_psnr_db", req.gate.lossless_psnr},
                                                  // null: the 50 dB rule alone (docs/gate-defences.md)
                                                  {"lossless_floor_slack_db", req.gate.precision_floor ? json(req.gate.floor_psnr_slack) : json(nullptr)},
                                                  {"object_check", req.gate.object_check < 0 ? "auto" : req.gate.object_check ? "on" : "off"},
                                                  {"min_margin", req.gate.min_margin},
                                                  {"timing_repeats", req.gate.timing_repeats}, {"max_prompts", req.gate.max_prompts}}},
                                  {"build", {{"version", bi.version}, {"commit", bi.commit}, {"flavour", bi.flavour}, {"build_type", bi.build_type},
                                             {"libtorch", bi.libtorch}, {"cuda", bi.cuda}, {"cudnn", bi.cudnn}, {"driver", bi.driver}}}}},
                 {"baseline", baseline},
                 {"tiers", tiers},
                 {"tier_notes", tier_notes},
                 {"deploy_checks", deploy_checks},
                 {"executors", executors},
                 {"prompt_categories", categories},
                 {"prompt_texts", prompt_texts},
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
    if (screen_of.count(c.hash)) entry["screen"] = screen_of[c.hash];
    if (device_s_of.count(c.hash))
      entry["device_seconds"] = {{"screen_s", device_s_of[c.hash].first}, {"gate_s", device_s_of[c.hash].second},
                                 {"total_s", device_s_of[c.hash].first + device_s_of[c.hash].second}};
    entry["screened_out"] = screen_of.count(c.hash) && screen_of[c.hash].value("dropped", false);
    if (c.val.is_object() && c.val.contains("worker")) entry["worker"] = c.val["worker"];
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
      h["clips"] = clip_links(out, dir);
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
