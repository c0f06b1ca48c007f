#include "gates/gate_timed_clocks.h"

#include <algorithm>

#include "base/strings.h"

namespace autooptim::gates {

using base::format_fixed;
using nlohmann::json;

namespace {

// CPU time may exceed cores x wall by this share and these seconds (the samples around a window are not
// taken at one instant).
constexpr double kCoreSlack = 0.05, kCoreSlackS = 0.02;
// The claimed blocks' GEMMs may run at up to this multiple of the calibrated rate per CPU second.
constexpr double kRateSlack = 2.0;

double sum(const std::vector<int64_t>& v) {
  double s = 0;
  for (int64_t x : v) s += static_cast<double>(x);
  return s;
}

// The fastest GEMM rate per CPU second over the gate's calibration rounds (noise only ever slows one).
double best_rate_per_cpu_s(const GateSequence& seq) {
  double r = 0;
  for (const auto& c : seq.baseline_calibrations) r = std::max(r, c.matmul_tflops_per_cpu_s);
  return r * 1e12;
}

bool timed_candidate(const GateSequence& seq, size_t i) {
  return std::find(seq.pair_candidate.begin(), seq.pair_candidate.end(), i) != seq.pair_candidate.end() ||
         std::find(seq.split_candidate.begin(), seq.split_candidate.end(), i) != seq.split_candidate.end() ||
         (i == seq.audit && seq.audit > 0);
}

}  // namespace

TimedClocks reconcile_timed_clocks(const GateEvidence& ev) {
  TimedClocks t;
  const GateSequence& seq = ev.sequence;
  const double cores = std::max(1, seq.cores);
  const double rate = best_rate_per_cpu_s(seq);
  const double per_block = ev.work.num_layers > 0 ? ev.work.candidate_linear / ev.work.num_layers : 0.0;
  const bool work_floor = !ev.on_cuda && rate > 0 && per_block > 0;
  json windows = json::array();
  for (size_t i = 0; i < seq.windows.size(); ++i) {
    const GateWindow& w = seq.windows[i];
    const double wall = w.after.wall_s - w.before.wall_s;
    // A plugin's candidate runs in its sandboxed worker: that process's CPU time, read from /proc by this one.
    const bool in_worker = w.candidate_code && w.before.worker_cpu_s >= 0;
    const double cpu =
        in_worker ? w.after.worker_cpu_s - w.before.worker_cpu_s : w.after.process_cpu_s - w.before.process_cpu_s;
    json row = {{"role", w.role}, {"wall_s", wall}, {"cpu_s", cpu}, {"cpu_of", in_worker ? "worker" : "gate"}};
    if (wall > 0 && cpu > cores * wall * (1 + kCoreSlack) + kCoreSlackS)
      t.problems.push_back("'" + w.role + "' used " + format_fixed(cpu, 3) + " s of CPU time in " +
                           format_fixed(wall, 3) + " s of wall time on " + format_fixed(cores, 0) +
                           " core(s): more than the cores can give, the clock that timed it is not the machine's");
    if (work_floor && timed_candidate(seq, i) && w.out.error.empty()) {
      const double blocks = sum(w.out.times.step_blocks);
      const double need = blocks * per_block / (kRateSlack * rate);
      row["blocks"] = blocks;
      row["cpu_floor_s"] = need;
      if (cpu < need)
        t.problems.push_back("'" + w.role + "' claims " + format_fixed(blocks, 0) +
                             " transformer blocks, whose GEMMs need " + format_fixed(need, 3) +
                             " s of CPU time at twice the calibrated rate, but " +
                             (in_worker ? "its worker" : "the process") + " spent " + format_fixed(cpu, 3) +
                             " s in its window: the work was done outside it");
    }
    windows.push_back(row);
  }
  t.report = {{"cores", cores},           {"core_slack", kCoreSlack},
              {"rate_slack", kRateSlack}, {"gemm_flops_per_cpu_s", rate},
              {"work_floor", work_floor}, {"windows", windows}};
  return t;
}

}  // namespace autooptim::gates
