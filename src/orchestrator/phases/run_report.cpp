// The report of a run: what was measured and decided, gathered from the run state and the gate folders,
// judged (judge_run) and written as report.json and its pages (orchestrator/report.h).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "base/stop_signals.h"
#include "base/strings.h"
#include "base/utc_time.h"
#include "orchestrator/agent_report.h"
#include "orchestrator/phases/phases.h"
#include "orchestrator/report.h"
#include "runtime/build_info.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

constexpr int kReportSchemaVersion = 2;

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

json heldout_entry(const RunState& s, const Candidate& c) {
  const GateRecord& v = *c.heldout;
  json h = {{"accepted", v.accepted},
            {"speedup", v.speedup},
            {"psnr", v.psnr},
            {"ssim", v.ssim},
            {"failure_signature", v.failure_signature}};
  const fs::path dir = s.out / "gates" / slug(c.m.id) / s.req.heldout_split;
  h["quality_by_prompt"] = read_quality(dir);
  h["clips"] = clip_links(s.out, dir);
  return h;
}

// What the candidate's gate run on the split measured and wrote.
void add_gate_run(const RunState& s, const Candidate& c, json& entry) {
  const json& perf = c.val->performance_details();
  if (perf.contains("baseline")) entry["baseline_timing"] = perf["baseline"];
  if (perf.contains("candidate")) entry["candidate_timing"] = perf["candidate"];
  entry["baseline_seconds"] = c.val->baseline_seconds;
  entry["candidate_seconds"] = c.val->candidate_seconds;
  const fs::path dir = s.out / "gates" / slug(c.m.id) / s.req.split;
  entry["gate_run"] = "gates/" + slug(c.m.id) + "/" + s.req.split;
  entry["quality_by_prompt"] = read_quality(dir);
  entry["clips"] = clip_links(s.out, dir);
}

json environment_block(const RunState& s) {
  const RunRequest& req = s.req;
  const auto& bi = runtime::build_info();
  return {{"timestamp", s.started_at},
          {"finished", base::utc_timestamp()},
          {"command_line", base::join(req.command_line, " ")},
          {"thresholds",
           {{"min_psnr_db", req.gate.min_psnr},
            {"min_ssim", req.gate.min_ssim},
            {"lossless_psnr_db", req.gate.lossless_psnr},
            // null: the 50 dB rule alone (docs/gate-defences.md)
            {"lossless_floor_slack_db", req.gate.precision_floor ? json(req.gate.floor_psnr_slack) : json(nullptr)},
            {"object_check", req.gate.object_check < 0 ? "auto"
                             : req.gate.object_check   ? "on"
                                                       : "off"},
            {"min_margin", req.gate.min_margin},
            {"timing_repeats", req.gate.timing_repeats},
            {"max_prompts", req.gate.max_prompts}}},
          {"build",
           {{"version", bi.version},
            {"commit", bi.commit},
            {"flavour", bi.flavour},
            {"build_type", bi.build_type},
            {"libtorch", bi.libtorch},
            {"cuda", bi.cuda},
            {"cudnn", bi.cudnn},
            {"driver", bi.driver}}}};
}

}  // namespace

WorkerTotals worker_totals(const RunState& s) {
  WorkerTotals t;
  t.launcher = s.launcher->describe();
  const auto exited_rss = s.launcher->exited_max_rss_kb();
  for (const auto& w : s.client->workers()) {
    json f = w.registration.value("final", json());
    if (!f.is_object()) f = w.heartbeat.is_object() ? w.heartbeat : json::object();
    const long rss = std::max<long>(f.value("peak_rss_kb", 0L), exited_rss.count(w.id) ? exited_rss.at(w.id) : 0L);
    t.rows.push_back({{"id", w.id},
                      {"host", w.host},
                      {"device", w.device},
                      {"device_name", w.device_name},
                      {"threads", w.registration.value("threads", 0)},
                      {"blas", gate_environment_of(w).value("blas", "")},
                      {"load_s", w.registration.value("load_s", 0.0)},
                      {"held_s", f.value("held_s", 0.0)},
                      {"busy_s", f.value("busy_s", 0.0)},
                      {"generating_s", f.value("generating_s", 0.0)},
                      {"generations", f.value("generations", 0)},
                      {"requests", f.value("requests", 0)},
                      {"peak_rss_kb", rss},
                      {"peak_device_bytes", f.value("peak_device_bytes", int64_t{0})},
                      {"state", w.state}});
    t.held_s += f.value("held_s", 0.0);
    t.generating_s += f.value("generating_s", 0.0);
    t.busy_s += f.value("busy_s", 0.0);
    t.peak_rss_kb = std::max(t.peak_rss_kb, rss);
    t.peak_device = std::max<int64_t>(t.peak_device, f.value("peak_device_bytes", int64_t{0}));
  }
  return t;
}

json baseline_entry(const RunState& s) {
  const std::string dir = "gates/" + slug(s.base.id) + "/" + s.req.split;
  json baseline = {{"manifest", s.base.id}, {"seconds", s.base_seconds}, {"gate_run", dir}};
  if (!s.base_verdict) {
    const auto it = s.not_gated.find({gates::manifest_hash(s.base), s.req.split});
    baseline["reason"] = it != s.not_gated.end() ? it->second : "not gated";
    return baseline;
  }
  const json& v = s.base_verdict->row;
  const json& perf = s.base_verdict->performance_details();
  if (perf.contains("baseline")) baseline["timing"] = perf["baseline"];
  baseline["clips"] = clip_links(s.out, s.out / dir);
  baseline["cached"] = v.contains("cached_from");
  baseline["cache_key"] = s.baseline_key;
  if (v.contains("cached_from")) baseline["cached_from"] = v["cached_from"];
  return baseline;
}

json candidate_entry(const RunState& s, const Candidate& c) {
  json verdicts = json::object();
  if (c.val)
    for (const auto& [g, x] : c.val->gates) verdicts[g] = {{"pass", x.pass}, {"reason", x.reason}};
  json entry = {{"id", c.m.id},
                {"family", c.m.family},
                {"speedup", c.speedup()},
                {"passed_all_but_official_config", c.survived_reduced()},
                {"psnr", c.psnr()},
                {"ssim", c.ssim()},
                {"accepted", c.accepted()},
                {"verdicts", verdicts},
                {"flags", c.m.flags},
                {"lossless", c.m.lossless},
                {"gated", c.val.has_value()},
                {"failure_signature", c.val ? c.val->failure_signature : std::string()},
                {"parents", c.m.parents}};
  const auto screen = s.screen_of.find(c.hash);
  if (screen != s.screen_of.end()) entry["screen"] = screen->second;
  if (const auto d = s.device_s_of.find(c.hash); d != s.device_s_of.end())
    entry["device_seconds"] = {
        {"screen_s", d->second.first}, {"gate_s", d->second.second}, {"total_s", d->second.first + d->second.second}};
  entry["screened_out"] = screen != s.screen_of.end() && screen->second.value("dropped", false);
  if (c.val && c.val->row.contains("worker")) entry["worker"] = c.val->row["worker"];
  if (!c.val) {
    const auto it = s.not_gated.find({c.hash, s.req.split});
    entry["not_gated_reason"] = it != s.not_gated.end() ? it->second : "not gated";
  } else {
    add_gate_run(s, c, entry);
  }
  if (c.heldout) {
    entry["heldout"] = heldout_entry(s, c);
  } else if (c.accepted()) {
    const auto it = s.not_gated.find({c.hash, s.req.heldout_split});
    if (it != s.not_gated.end()) entry["heldout"] = {{"gated", false}, {"reason", it->second}};
  }
  return entry;
}

json build_report(const RunState& s, const WorkerTotals& w) {
  const RunRequest& req = s.req;
  struct rusage self_ru {};
  getrusage(RUSAGE_SELF, &self_ru);
  const double elapsed = std::chrono::duration<double>(Clock::now() - s.start).count();
  const int sig = base::StopSignals::signal();
  json report = {
      {"schema_version", kReportSchemaVersion},
      {"model", req.load.model},
      {"weights", s.first_worker.weights},
      {"weights_id", s.first_worker.weights_id},
      {"device", s.first_worker.device},
      {"device_name", s.first_worker.device_name},
      {"build", gates::Worker::build_id()},
      {"official_config", s.official},
      {"config", gates::to_json(s.base.config)},
      {"split", req.split},
      {"split_prompts", s.split_all},
      {"heldout_split", req.heldout_split},
      {"gate_runs", s.gate_runs},
      {"budget",
       {{"trials", req.budget_trials}, {"minutes", req.budget_minutes}, {"executor_trials", req.executor_trials}}},
      {"elapsed_s", elapsed},
      {"device_seconds",
       {{"devices", static_cast<int64_t>(s.slots.size())},
        {"total_s", w.held_s},
        {"wall_s", elapsed},
        {"busy_s", w.busy_s},
        {"generating_s", w.generating_s},
        {"generating_share", w.held_s > 0 ? w.generating_s / w.held_s : 0.0},
        {"gating_s", s.gating_s},
        {"screening_s", s.screening_s},
        {"exploration_s", s.explore_s},
        {"kind", s.first_worker.device == "cuda" ? "GPU" : "CPU"}}},
      {"workers", w.rows},
      {"worker_events", s.worker_events},
      {"launcher", w.launcher},
      {"phases",
       {{"gate", {{"wall_s", s.gate_phase.wall_s}, {"gate_runs", s.gate_phase.gate_runs}}},
        {"compose", {{"wall_s", s.compose_phase.wall_s}, {"gate_runs", s.compose_phase.gate_runs}}}}},
      {"memory",
       {{"peak_worker_rss_kb", w.peak_rss_kb},
        {"peak_device_bytes", w.peak_device},
        {"executors_peak_rss_kb", s.executors_rss_kb},
        {"orchestrator_peak_rss_kb", self_ru.ru_maxrss},
        {"models_loaded", static_cast<int64_t>(w.rows.size())},
        {"note", "only the workers hold the model; the run's peak is one worker's"}}},
      {"screening",
       {{"min_speedup", s.screen_min},
        {"slack", req.screen_slack},
        {"forwards", req.screen_forwards},
        {"screened", s.screens},
        {"dropped", s.screened_out}}},
      {"environment", environment_block(s)},
      {"baseline", baseline_entry(s)},
      {"tiers", s.tiers},
      {"tier_notes", s.tier_notes},
      {"deploy_checks", s.deploy_checks},
      {"executors", s.executors},
      {"agents", agents_section(s)},
      {"prompt_categories", s.categories},
      {"prompt_texts", s.prompt_texts},
      {"candidates", json::array()}};
  if (sig) report["interrupted"] = {{"signal", sig}, {"name", signal_name(sig)}};
  if (!s.not_gated.empty()) report["budget_note"] = s.not_gated.begin()->second;
  for (const auto& c : s.cands) report["candidates"].push_back(candidate_entry(s, c));
  return report;
}

RunOutcome finish_report(RunState& s) {
  json report = build_report(s, worker_totals(s));
  RunOutcome outcome = judge_run(report, s.req.fail_if_no_tier);
  report["outcome"] = {{"exit_code", outcome.exit_code},
                       {"problems", outcome.problems},
                       {"warnings", outcome.warnings},
                       {"fail_if_no_tier", s.req.fail_if_no_tier}};
  write_reports(s.out.string(), report);
  outcome.report_path = (s.out / "report.json").string();
  return outcome;
}

}  // namespace autooptim::orchestrator
