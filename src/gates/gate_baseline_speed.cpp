#include "gates/gate_baseline_speed.h"

#include <algorithm>

#include "base/sha256.h"
#include "base/strings.h"
#include "base/utc_time.h"
#include "models/model_table.h"
#include "gates/integrity.h"
#include "gates/robust_stats.h"

namespace autooptim::gates {

using base::format_fixed;
using nlohmann::json;

namespace {

// The baseline's efficiency on each clock it is timed by, run by run and at its best.
struct Efficiency {
  Calibration cal, cpu_cal;
  double cal_seconds = 0, forward_floor_s = 0, value = 0;  // value: the more favourable clock's
  std::vector<double> runs_wall, runs_cpu;
  std::map<std::string, double> by_clock, noise;
  std::vector<std::string> clocks;
};

double forward_seconds(const ForwardWork& f, const Calibration& c) {
  return (f.base_linear + f.base_time_embedding) / (c.matmul_tflops * 1e12) +
         f.base_attention / (c.attention_tflops * 1e12);
}

// The time the baseline's forwards need at the calibrated rates over the time a run took, on two clocks,
// both over its denoising alone (a slowdown there is not diluted by the text encoding and the decode).
// Wall: the wall time of its denoising against the rates per second (other processes slow the calibration
// next to it as much). CPU (on the CPU only): the process's CPU time during its denoising against the rates
// per CPU second. Another process on the same core's other hardware thread slows a CPU second (the wall
// clock less so); a slowed baseline is slower on both.
// Noise only ever adds time, so each side is its best: the fastest calibration round of the gate and the
// fastest baseline run (a slowed baseline is slow in every run).
Efficiency efficiency_of(const GateEvidence& ev) {
  Efficiency e;
  const auto& rounds = ev.sequence.baseline_calibrations;
  e.cal = best_calibration(rounds);
  for (const auto& c : rounds) e.cal_seconds += c.seconds;
  e.forward_floor_s = forward_seconds(ev.work, e.cal);
  e.cpu_cal = e.cal;
  e.cpu_cal.matmul_tflops = e.cpu_cal.attention_tflops = 0;
  for (const auto& c : rounds) {
    e.cpu_cal.matmul_tflops = std::max(e.cpu_cal.matmul_tflops, c.matmul_tflops_per_cpu_s);
    e.cpu_cal.attention_tflops = std::max(e.cpu_cal.attention_tflops, c.attention_tflops_per_cpu_s);
  }
  std::vector<size_t> base_windows = ev.sequence.pair_baseline;
  if (ev.sequence.baseline_check) base_windows.push_back(*ev.sequence.baseline_check);
  const double N = static_cast<double>(ev.work.base_forwards);
  for (size_t k : base_windows) {
    const GateWindow& bw = ev.sequence.windows[k];
    const double wall = bw.out.times.denoising, cpu = bw.out.times.denoising_cpu;
    e.runs_wall.push_back(wall > 0 ? N * forward_seconds(ev.work, e.cal) / wall : 0.0);
    e.runs_cpu.push_back(cpu > 0 ? N * forward_seconds(ev.work, e.cpu_cal) / cpu : 0.0);
  }
  // The CPU clock where the runs measured it (a GPU's work is not the host's CPU time).
  const bool cpu_measured = std::all_of(e.runs_cpu.begin(), e.runs_cpu.end(), [](double x) { return x > 0; });
  e.clocks = ev.on_cuda || !cpu_measured ? std::vector<std::string>{"wall"} : std::vector<std::string>{"wall", "cpu"};
  e.by_clock["wall"] = *std::max_element(e.runs_wall.begin(), e.runs_wall.end());
  e.by_clock["cpu"] = *std::max_element(e.runs_cpu.begin(), e.runs_cpu.end());
  e.noise["wall"] = robust_noise(e.runs_wall);
  e.noise["cpu"] = robust_noise(e.runs_cpu);
  for (const auto& c : e.clocks) e.value = std::max(e.value, e.by_clock[c]);
  return e;
}

// Against the records, clock by clock, with the tolerance the noise allows; the baseline is slower when
// any clock says so. Returns the problem ("" when none); shows the comparison under which. *below_band:
// some clock is slower than the records by more than the noise of this gate's own runs (kRecordBand at
// least), so the entry does not join them even when tolerated (a slow baseline never becomes the record).
constexpr double kRecordBand = 0.1;

std::string compare_with_records(const std::vector<json>& ref, double min_tol, const char* which, const Efficiency& e,
                                 double base_denoise_s, json& record_check, bool* below_band) {
  double slow = -1e9;
  std::string detail;
  json shown = json::object();
  for (const auto& c : e.clocks) {
    std::vector<double> effs, noises = {e.noise.at(c)};
    for (const auto& r : ref) {
      if (!r.contains("efficiency") || !r["efficiency"].is_object() || !r["efficiency"].contains(c)) continue;
      effs.push_back(r["efficiency"].value(c, 0.0));
      noises.push_back(r.contains("noise") && r["noise"].is_object() ? r["noise"].value(c, 0.0) : 0.0);
    }
    if (effs.empty()) return "";
    // The noise: the typical robust spread of the efficiency over one gate's baseline runs (here and
    // recorded), and how much the recorded gates differ among themselves.
    const double ref_eff = median_of(effs);
    // Few records say little about how far this machine's load moves the efficiency (an honest baseline on
    // a shared 2-core machine was seen far below a single earlier gate's on both clocks; docs/gate-defences.md):
    // until 5 records exist, only half the recorded efficiency or less is refused (the sandbag switch's is
    // a quarter).
    const double few = effs.size() < 5 ? 1.0 : 0.0;
    const double tol = std::max({min_tol, few, 3.0 * std::max(median_of(noises), robust_noise(effs))});
    const double now = e.by_clock.at(c);
    const double slow_c = now > 0 ? ref_eff / now - 1.0 : 1e9;
    shown[c] = {
        {"entries", effs.size()}, {"recorded", ref_eff}, {"now", now}, {"slower_by", slow_c}, {"tolerance", tol}};
    slow = std::max(slow, slow_c - tol);
    if (slow_c > std::max(kRecordBand, 3.0 * e.noise.at(c))) *below_band = true;
    detail += std::string(detail.empty() ? "" : "; ") + c + " clock: efficiency " + format_fixed(now, 4) + " against " +
              format_fixed(ref_eff, 4) + " recorded, " + format_fixed(100 * slow_c, 0) + "% slower, tolerance " +
              format_fixed(100 * tol, 0) + "%";
  }
  record_check[which] = shown;
  if (slow > 0)
    return std::string("the baseline is slower than the records of ") + which + " allow (" + detail + "; denoising " +
           format_fixed(base_denoise_s, 3) + " s)";
  return "";
}

json record_entry(const GateEvidence& ev, const BaselineIdentity& id, const Efficiency& e) {
  const GateTiming& t = ev.timing;
  json entry = {{"build", id.build},
                {"when", base::utc_timestamp()},
                {"manifest", id.candidate_id},
                {"denoise_s", t.baseline_denoise_s},
                {"total_s", t.baseline.median},
                {"text_s", t.baseline_text_s},
                {"decode_s", t.baseline_decode_s},
                {"spread", t.baseline.spread()},
                {"efficiency", json::object()},
                {"noise", json::object()},
                {"matmul_tflops", e.cal.matmul_tflops},
                {"attention_tflops", e.cal.attention_tflops}};
  for (const auto& c : e.clocks) {
    entry["efficiency"][c] = e.by_clock.at(c);
    entry["noise"][c] = e.noise.at(c);
  }
  return entry;
}

std::string below_floor(const GateEvidence& ev, const Efficiency& e, double floor) {
  const int64_t N = ev.work.base_forwards;
  const bool cpu_clock = !ev.on_cuda;
  return "the baseline's efficiency is " + format_fixed(e.value, 4) +
         " of the throughput calibrated next to its runs (wall " + format_fixed(e.by_clock.at("wall"), 4) +
         (cpu_clock ? ", CPU " + format_fixed(e.by_clock.at("cpu"), 4) : std::string()) + "), below the floor " +
         format_fixed(floor, 4) + ": denoising took " + format_fixed(ev.timing.baseline_denoise_s, 3) +
         " s where its " + std::to_string(N) + " forwards need " + format_fixed(N * e.forward_floor_s, 3) +
         " s at the calibrated rates";
}

json speed_report(const GateEvidence& ev, const Efficiency& e, double floor, const json& entry,
                  const json& record_check) {
  json runs = {{"wall", e.runs_wall}};
  if (!ev.on_cuda) runs["cpu"] = e.runs_cpu;
  return {{"efficiency", e.value},
          {"efficiency_by_clock", entry["efficiency"]},
          {"efficiency_runs", runs},
          {"floor", floor},
          {"denoise_s", ev.timing.baseline_denoise_s},
          {"forwards", ev.work.base_forwards},
          {"forward_floor_s", e.forward_floor_s},
          {"calibration",
           {{"matmul_tflops", e.cal.matmul_tflops},
            {"attention_tflops", e.cal.attention_tflops},
            {"matmul_tflops_per_cpu_s", e.cpu_cal.matmul_tflops},
            {"attention_tflops_per_cpu_s", e.cpu_cal.attention_tflops},
            {"tokens", e.cal.tokens},
            {"dim", e.cal.dim},
            {"heads", e.cal.heads},
            {"runs", ev.sequence.baseline_calibrations.size()},
            {"seconds", e.cal_seconds}}},
          {"records", record_check}};
}

}  // namespace

Calibration best_calibration(const std::vector<Calibration>& rounds) {
  if (rounds.empty()) return {};  // a gate that stopped before its first baseline run
  Calibration cal = rounds.front();
  for (const auto& c : rounds) {
    cal.matmul_tflops = std::max(cal.matmul_tflops, c.matmul_tflops);
    cal.attention_tflops = std::max(cal.attention_tflops, c.attention_tflops);
  }
  return cal;
}

double baseline_efficiency_floor(const GateSettings& S, const std::string& model, bool on_cuda) {
  // The model's defaults (models/: well below what an honest baseline reaches, docs/gate-defences.md).
  if (S.min_baseline_efficiency >= 0) return S.min_baseline_efficiency;
  const models::GateDefaults& d = models::model_facts(model).gate;
  return on_cuda ? d.min_baseline_efficiency_cuda : d.min_baseline_efficiency_cpu;
}

json baseline_record_identity(const BaselineIdentity& id, int baseline_threads) {
  json identity = machine_identity();
  identity["model"] = id.model;
  for (const char* k : {"weights_hash", "device", "device_name", "dtype"}) identity[k] = id.environment[k];
  identity["cpu_threads"] = baseline_threads;
  identity["config"] = id.config;
  identity["baseline_hash"] = id.baseline_hash;
  return identity;
}

std::string baseline_record_key(const json& record_identity) {
  return sha256_hex(record_identity.dump()).substr(0, 24);
}

BaselineSpeed judge_baseline_speed(const GateEvidence& ev, const BaselineIdentity& id, const json& record_identity,
                                   const std::vector<json>& records, bool untimed_clean, const GateSettings& S) {
  BaselineSpeed r;
  const Efficiency e = efficiency_of(ev);
  const double floor = baseline_efficiency_floor(S, id.model, ev.on_cuda);
  r.identity = record_identity;
  r.key = baseline_record_key(record_identity);
  r.entry = record_entry(ev, id, e);
  json record_check = {{"path", id.records_path}, {"key", r.key}};
  std::vector<json> same_build, other_builds;
  for (const auto& x : records) (x.value("build", "") == id.build ? same_build : other_builds).push_back(x);
  const double denoise_s = ev.timing.baseline_denoise_s;
  if (floor > 0 && e.value < floor) r.problem = below_floor(ev, e, floor);
  bool below_band = false;
  if (r.problem.empty())
    r.problem = compare_with_records(same_build, S.baseline_record_tolerance, "this build", e, denoise_s, record_check,
                                     &below_band);
  if (r.problem.empty())
    r.problem = compare_with_records(other_builds, 2 * S.baseline_record_tolerance, "other builds of this flavour", e,
                                     denoise_s, record_check, &below_band);
  r.trusted = r.problem.empty() && untimed_clean && !below_band;
  record_check["below_record_band"] = below_band;
  record_check["recorded"] = r.trusted;
  r.report = speed_report(ev, e, floor, r.entry, record_check);
  return r;
}

}  // namespace autooptim::gates
