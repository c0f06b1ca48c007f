#include "gates/gate.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <filesystem>

#include "base/json_file.h"
#include "base/utc_time.h"
#include "gates/checks/artifacts.h"
#include "gates/checks/authenticity.h"
#include "gates/checks/off_identity.h"
#include "gates/checks/official_config.h"
#include "gates/checks/performance.h"
#include "gates/checks/quality.h"
#include "gates/checks/refused.h"
#include "gates/checks/visual.h"
#include "gates/gate_baseline_speed.h"
#include "gates/gate_files.h"
#include "models/model_table.h"
#include "gates/gate_run.h"
#include "gates/sandboxed_worker.h"
#include "gates/gate_timed_clocks.h"
#include "gates/gate_untimed_work.h"
#include "gates/gate_verdict.h"
#include "gates/integrity.h"
#include "runtime/blas_threads.h"
#include "runtime/device.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::gates {

Manifest find_manifest(const std::string& manifests_dir, const std::string& model, const std::string& id) {
  const fs::path dir = fs::path(manifests_dir) / model;
  if (!fs::is_directory(dir)) throw Error(dir.string() + ": no manifests folder for model '" + model + "'");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    Manifest m = load_manifest(f.string());
    if (m.id == id) return m;
  }
  throw Error("no manifest with id '" + id + "' under " + dir.string());
}

namespace {

// Every judgement setting a gate request carries, by its key: the one list settings_to_json and
// settings_from_json both walk (a setting missing here stays at the worker's default).
template <class Settings, class Visit>
void each_setting(Settings& s, Visit&& visit) {
  visit("prompts_dir", s.prompts_dir);
  visit("cache_dir", s.cache_dir);
  visit("records_path", s.records_path);
  visit("timing_repeats", s.timing_repeats);
  visit("min_timing_repeats", s.min_timing_repeats);
  visit("quiet_noise", s.quiet_noise);
  visit("pairs_from_history", s.pairs_from_history);
  visit("warmup_steps", s.warmup_steps);
  visit("stop_early", s.stop_early);
  visit("min_margin", s.min_margin);
  visit("min_psnr", s.min_psnr);
  visit("min_ssim", s.min_ssim);
  visit("lossless_psnr", s.lossless_psnr);
  visit("precision_floor", s.precision_floor);
  visit("floor_psnr_slack", s.floor_psnr_slack);
  visit("floor_ssim_slack", s.floor_ssim_slack);
  visit("floor_clip_psnr_slack", s.floor_clip_psnr_slack);
  visit("floor_clip_ssim_slack", s.floor_clip_ssim_slack);
  visit("audit_psnr_slack", s.audit_psnr_slack);
  visit("off_time_tolerance", s.off_time_tolerance);
  visit("exact_off_identity", s.exact_off_identity);
  visit("max_prompts", s.max_prompts);
  visit("min_baseline_efficiency", s.min_baseline_efficiency);
  visit("baseline_record_tolerance", s.baseline_record_tolerance);
  visit("untimed_work_fraction", s.untimed_work_fraction);
  visit("min_forward_share", s.min_forward_share);
  visit("object_check", s.object_check);
}

}  // namespace

json settings_to_json(const GateSettings& s) {
  json j = json::object();
  each_setting(s, [&](const char* key, const auto& field) { j[key] = field; });
  return j;
}

GateSettings settings_from_json(const json& j) {
  GateSettings s;
  if (!j.is_object()) throw Error("gate settings: not a JSON object");
  each_setting(s, [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      field = j.at(key).get<std::decay_t<decltype(field)>>();
    } catch (const json::exception&) {
      throw Error(std::string("gate settings: '") + key + "' has the wrong type (" + j.at(key).type_name() + ")");
    }
  });
  return s;
}

Manifest pinned_baseline(const std::string& model) {
  const json j = {{"id", model + "/baseline"},
                  {"kind", "baseline"},
                  {"family", "none"},
                  {"model", model},
                  {"runtime", "autooptim/1"},
                  {"base", nullptr},
                  {"flags", json::object()},
                  {"lossless", true},
                  {"config", to_json(official_config(model))},
                  {"description", "the harness's pinned baseline: every technique off, libtorch's own threads"}};
  return parse_manifest(j, "the pinned baseline of " + model);
}

json gate_environment(Worker& w) {
  const auto dev = w.device();
  return {
      {"build", Worker::build_id()},
      {"weights_hash", w.weights_hash()},
      {"device", dev.is_cuda() ? "cuda" : "cpu"},
      {"device_name", runtime::device_name(dev)},
      {"dtype", c10::toString(w.request().precision.compute)},
      // The CPU BLAS's own threads change every CPU timing (runtime/blas_threads.h): a verdict holds for one setting.
      {"blas", runtime::settle_blas_threads()}};
}

bool same_environment(const json& row, Worker& w) {
  const json env = gate_environment(w);
  for (const auto& [k, v] : env.items())
    if (!row.contains(k) || row[k] != v) return false;
  return true;
}

namespace {

void write_json(const fs::path& path, const json& j) { base::write_json_file(path.string(), j); }

// The ledger row of a verdict: the verdict and the environment it holds for.
json ledger_row(const GateVerdict& v, const json& env) {
  json row = v.to_json();
  for (const auto& [k, val] : env.items()) row[k] = val;
  return row;
}

// A manifest already rejected in this environment is not run again under a cosmetic change. Not the
// baseline: its own gate is its measurement ("not faster than itself" is no rejection), and a resumed run
// must be able to measure it again (issue 38). Writes the refusal when there is one.
bool refuse_by_ledger(Worker& w, const Manifest& cand, const std::string& split, const fs::path& out, const json& env,
                      Ledger* ledger, GateVerdict& v) {
  if (!ledger || cand.kind == "baseline") return false;
  const auto rejection = find_rejection(ledger->read_all(), v.manifest_hash, split,
                                        [&](const json& row) { return same_environment(row, w); });
  if (!rejection) return false;
  v.refused = true;
  v.failure_signature = rejection->value("failure_signature", "");
  v.checks.push_back(check_refused(*rejection, v.manifest_hash));
  write_json(out / "verdict.json", v.to_json());
  ledger->append(ledger_row(v, env));
  return true;
}

// The baseline: the harness's pinned one, at the harness's configuration; never a candidate's choice.
Manifest harness_baseline(const Manifest& cand, const GateSettings& S, GateVerdict& v) {
  const Manifest pinned = pinned_baseline(cand.model);
  Manifest base = pinned;
  if (S.baseline_config) {
    base.config = *S.baseline_config;
    base = parse_manifest(to_json(base), "the pinned baseline at the run's configuration");
  }
  if (cand.kind != "baseline" && cand.base.value_or("") != base.id)
    throw Error("manifest '" + cand.id + "': its base '" + cand.base.value_or("") +
                "' is not the harness's baseline '" + base.id +
                "' (the baseline always comes from the harness, never from a manifest)");
  v.baseline_hash = manifest_hash(base);
  v.integrity["baseline"] = {{"id", base.id},
                             {"hash", v.baseline_hash},
                             {"pinned_hash", manifest_hash(pinned)},
                             {"source", S.baseline_config ? "pinned, at the harness's configuration" : "pinned"}};
  return base;
}

std::vector<Prompt> gate_prompts(const GateSettings& S, const std::string& split) {
  auto prompts = load_prompts(S.prompts_dir, true).split(split);
  if (S.max_prompts > 0 && static_cast<int64_t>(prompts.size()) > S.max_prompts)
    prompts.resize(static_cast<size_t>(S.max_prompts));
  if (prompts.empty()) throw Error("split '" + split + "' has no prompts");
  return prompts;
}

json gate_metadata(Worker& w, const Manifest& cand, const Manifest& base, const std::string& split,
                   const std::vector<Prompt>& prompts, const json& env, const GateVerdict& v, const GateSettings& S) {
  json meta = env;  // build, weights hash, device, device name, dtype, BLAS threads
  meta.update({{"model", w.model()},
               {"weights", w.weights_label()},
               {"clocks", runtime::gpu_clocks(w.device())},
               {"cpu_threads", at::get_num_threads()},
               {"seed", cand.config.seed},
               {"split", split},
               {"prompts", json::array()},
               {"baseline", base.id},
               {"baseline_hash", v.baseline_hash},
               {"timing_repeats", S.timing_repeats},
               {"started", base::utc_timestamp()}});
  for (const auto& p : prompts) meta["prompts"].push_back(p.id);
  return meta;
}

// The baseline against the machine (calibration and records). A slowed baseline is an error of the run;
// but a candidate that worked outside its windows slowed the baseline's runs itself: its verdict says so
// (authenticity) and the baseline is neither judged nor recorded from this gate.
void guard_baseline_speed(const GateEvidence& ev, const Manifest& cand, const Manifest& base, const json& env,
                          const UntimedWork& untimed, const GateSettings& S, const fs::path& out, GateVerdict& v) {
  BaselineIdentity id;
  id.model = base.model;
  id.baseline_hash = v.baseline_hash;
  id.build = Worker::build_id();
  id.candidate_id = cand.id;
  id.environment = env;
  id.config = to_json(base.config);
  id.records_path = !S.records_path.empty()
                        ? S.records_path
                        : (fs::path(ev.cache_root).parent_path() / "baseline-records.json").string();
  BaselineRecords records(id.records_path);
  const json identity = baseline_record_identity(id, ev.sequence.baseline_threads);
  const auto recorded = records.entries(baseline_record_key(identity));
  const BaselineSpeed speed = judge_baseline_speed(ev, id, identity, recorded, untimed.problems.empty(), S);
  v.integrity["baseline_speed"] = speed.report;
  if (!speed.problem.empty() && untimed.problems.empty()) {
    write_json(out / "baseline.json", v.integrity);
    throw BaselineError(speed.problem + " -- a slowed baseline is an error of the run, not a speedup (" + out.string() +
                        "/baseline.json)");
  }
  if (speed.trusted) records.append(speed.key, speed.identity, speed.entry);
}

// The verdict's row in the ledger, with what the gate ran on.
void append_to_ledger(Ledger* ledger, const GateVerdict& v, const json& env, const json& meta, const Manifest& cand,
                      const fs::path& out, const std::string& model) {
  if (!ledger) return;
  json row = ledger_row(v, env);
  row["clocks"] = meta["clocks"];
  row["seed"] = cand.config.seed;
  row["out_dir"] = out.string();
  row["family"] = cand.family;
  row["kind"] = cand.kind;
  row["model"] = model;
  ledger->append(row);
}

// A gate that stopped as soon as its verdict was certain (GateSettings::stop_early): rejected by the check
// it could no longer pass (performance after the pairs, authenticity on an idle switch, quality on a split
// clip below the claim); the configuration is still judged, nothing else was made.
void stopped_verdict(const GateEvidence& ev, const Manifest& cand, const GateSettings& S, GateVerdict& v) {
  const GateTiming& t = ev.timing;
  v.baseline_seconds = t.baseline.median;
  v.candidate_seconds = t.candidate.median;
  v.speedup = t.speedup;
  v.integrity["timing_choices"] = timing_choices(ev.sequence, S);
  v.integrity["stopped_early"] = {
      {"after_generations", ev.sequence.windows.size()}, {"check", ev.stopped_check}, {"reason", ev.stopped_early}};
  v.checks.push_back(check_official_config(cand.config, official_config(cand.model)));
  json details = ev.stopped_details;
  details.update({{"baseline", t.baseline.to_json()},
                  {"candidate", t.candidate.to_json()},
                  {"noise", t.noise},
                  {"speedup", t.speedup},
                  {"stopped_early", true}});
  if (ev.stopped_check == "quality" && details.contains("psnr_mean") && details["psnr_mean"].is_number()) {
    v.psnr = details["psnr_mean"].get<double>();
    if (details["ssim_mean"].is_number()) v.ssim = details["ssim_mean"].get<double>();
  }
  v.checks.push_back({ev.stopped_check, false, ev.stopped_early, details});
  decide_verdict(v);
}

}  // namespace

GateVerdict run_gate(Worker& w, const Manifest& cand, const std::string& split, const std::string& out_dir,
                     const GateSettings& S, Ledger* ledger) {
  const fs::path out(out_dir);
  fs::create_directories(out / "videos");
  GateVerdict v;
  v.manifest_id = cand.id;
  v.manifest_hash = manifest_hash(cand);
  v.split = split;
  const json env = gate_environment(w);
  if (refuse_by_ledger(w, cand, split, out, env, ledger, v)) return v;
  const Manifest base = harness_baseline(cand, S, v);
  const std::vector<Prompt> prompts = gate_prompts(S, split);
  GateProgressCounter progress(
      S, cand.id, split,
      expected_gate_runs(static_cast<int64_t>(prompts.size()), S, manifest_hash(cand) == manifest_hash(base)));
  write_json(out / "manifest.json", to_json(cand));
  const json meta = gate_metadata(w, cand, base, split, prompts, env, v, S);
  write_json(out / "metadata.json", meta);

  // A plugin's manifest runs in a sandboxed worker that loads it, the baseline in another (sandboxed_worker.h).
  const PluginGateWorkers plugin =
      cand.plugin.empty() ? PluginGateWorkers{} : start_plugin_workers(w.request(), cand.plugin, S);
  GateEvidence ev = run_gate_generations(
      w, cand, base, prompts, {env, v.baseline_hash, out.string(), plugin.candidate.get(), plugin.baseline.get()}, S,
      progress);
  if (plugin.candidate) {
    v.integrity["generation_workers"] = plugin.report();
    plugin.save_logs(out.string());
  }
  if (!ev.stopped_early.empty()) {
    stopped_verdict(ev, cand, S, v);
    write_json(out / "verdict.json", v.to_json());
    append_to_ledger(ledger, v, env, meta, cand, out, w.model());
    return v;
  }
  v.integrity["baseline_cache"] = ev.cache_check;
  v.baseline_seconds = ev.timing.baseline.median;
  v.candidate_seconds = ev.timing.candidate.median;
  v.speedup = ev.timing.speedup;
  const UntimedWork untimed = audit_untimed_work(ev.sequence, ev.timing.candidate.median, S);
  v.integrity["untimed_work"] = untimed.report;
  v.integrity["timing_choices"] = timing_choices(ev.sequence, S);
  json drawn = json::array();
  for (const auto& c : ev.clips)
    if (c.pair) drawn.push_back({{"prompt", c.run.prompt.id}, {"seed", c.run.seed}});
  v.integrity["drawn_in_timed_window"] = drawn;
  guard_baseline_speed(ev, cand, base, env, untimed, S, out, v);

  v.checks.push_back(check_artifacts(ev, write_clip_videos(ev, cand.config, out.string())));
  v.checks.push_back(check_official_config(cand.config, official_config(cand.model)));
  ev.peak_tflops = w.peak_tflops();
  v.checks.push_back(check_performance(ev));
  v.checks.push_back(check_off_identity(ev, S));
  const QualityComparisons comparisons = compare_quality(ev, cand.lossless, S);
  const auto controls = run_precision_controls(w, base, ev, comparisons.need_precision_control, progress);
  const QualityResult quality = check_quality(ev, comparisons, cand.lossless, S, controls);
  v.psnr = quality.worst_psnr;
  v.ssim = quality.worst_ssim;
  v.checks.push_back(quality.check);
  // The object check: for models whose prompts are procedural scenes of one object, unless set.
  const bool objects = S.object_check > 0 || (S.object_check < 0 && models::model_facts(cand.model).gate.object_check);
  const VisualResult visual = check_visual(ev, objects);
  v.checks.push_back(visual.check);
  const TimedClocks clocks = reconcile_timed_clocks(ev);
  v.integrity["timed_clocks"] = clocks.report;
  const AuthenticityResult authenticity = check_authenticity(ev, cand, untimed, S, clocks);
  v.integrity["seen_vs_fresh"] = authenticity.seen_vs_fresh;
  v.checks.push_back(authenticity.check);

  decide_verdict(v);
  write_gate_reports(ev, v, quality.clips, visual.clips, out.string());
  check_reports_parse(v, out.string());
  write_json(out / "verdict.json", v.to_json());
  append_to_ledger(ledger, v, env, meta, cand, out, w.model());
  return v;
}

}  // namespace autooptim::gates
