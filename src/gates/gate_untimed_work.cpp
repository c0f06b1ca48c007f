#include "gates/gate_untimed_work.h"

#include <algorithm>

#include "base/strings.h"
#include "gates/robust_stats.h"

namespace autooptim::gates {

using base::format_fixed;
using nlohmann::json;

namespace {

// What the process did across the candidate's part of the sequence.
struct Census {
  double gaps_cpu = 0, foreign_in_baseline = 0, queued_device_s = 0;
  double harness_cpu = 0;  // excused: the harness's own work between runs on other threads
  json threads = json::array();
  int worst_extra = 0;
  std::string worst_after;
};

Census take_census(const GateSequence& seq) {
  Census c;
  const auto& windows = seq.windows;
  for (size_t i = seq.first_candidate; i < windows.size(); ++i) {
    const GateWindow& win = windows[i];
    const GateWindow& prev = windows[i - 1];
    // Between windows the harness's own threads do the gate's work; any other thread's is the candidate's.
    c.gaps_cpu += std::max(0.0, win.before.foreign_cpu_s() - prev.after.foreign_cpu_s() - win.harness_foreign_cpu_s);
    c.harness_cpu += win.harness_foreign_cpu_s;
    if (!win.candidate_code)
      c.foreign_in_baseline += std::max(0.0, win.after.foreign_cpu_s() - win.before.foreign_cpu_s());
    if (i > seq.first_candidate) c.queued_device_s += win.out.pre_sync_s;
    const int extra = win.after.threads - seq.threads_reference;
    c.threads.push_back({{"after", win.role}, {"threads", win.after.threads}});
    if (extra > c.worst_extra) {
      c.worst_extra = extra;
      c.worst_after = win.role;
    }
  }
  return c;
}

// A plugin's sandboxed worker (gates/sandboxed_worker.h) is a process of its own: every CPU second it spends
// outside the candidate's windows (during the baseline's runs, which it would slow, or between runs, preparing
// the next answer) is untimed work. From its first window on: it loaded its model before.
void audit_sandboxed_worker(const GateSequence& seq, const GateSettings& S, UntimedWork& u) {
  const auto& w = seq.windows;
  if (w.empty() || w.front().before.worker_cpu_s < 0) return;
  double in_baseline = 0, between = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w[i].candidate_code) in_baseline += std::max(0.0, w[i].after.worker_cpu_s - w[i].before.worker_cpu_s);
    if (i > 0) between += std::max(0.0, w[i].before.worker_cpu_s - w[i - 1].after.worker_cpu_s);
  }
  std::vector<double> timed;
  for (size_t i : seq.pair_candidate) timed.push_back(w[i].after.worker_cpu_s - w[i].before.worker_cpu_s);
  const double run_cpu = median_of(timed);
  const double bound = std::max(0.2, S.untimed_work_fraction * run_cpu);
  const double outside = in_baseline + between;
  u.report["candidate_worker"] = {{"cpu_s_outside_its_runs", outside},
                                  {"during_baseline_runs_cpu_s", in_baseline},
                                  {"between_runs_cpu_s", between},
                                  {"timed_run_cpu_s", run_cpu},
                                  {"bound_s", bound}};
  if (outside > bound)
    u.problems.push_back("untimed work in the plugin's worker: " + format_fixed(outside, 3) +
                         " s of its CPU time outside the candidate's timed runs (" + format_fixed(in_baseline, 3) +
                         " s during the baseline's runs, " + format_fixed(between, 3) + " s between runs), bound " +
                         format_fixed(bound, 3) + " s (" + format_fixed(S.untimed_work_fraction, 2) +
                         " of a timed run's " + format_fixed(run_cpu, 3) + " s)");
}

}  // namespace

UntimedWork audit_untimed_work(const GateSequence& seq, double candidate_median_s, const GateSettings& S) {
  // A candidate that asks for more CPU threads than the baseline grows libtorch's pool once: those
  // threads are allowed (they sit idle outside its runs, which the CPU accounting checks).
  const int allowance = seq.candidate_threads_flag > seq.baseline_threads
                            ? static_cast<int>(seq.candidate_threads_flag) - seq.baseline_threads
                            : 0;
  const Census c = take_census(seq);
  std::vector<double> timed_cpu;
  for (size_t i : seq.pair_candidate)
    timed_cpu.push_back(seq.windows[i].after.process_cpu_s - seq.windows[i].before.process_cpu_s);
  const double run_cpu = median_of(timed_cpu);
  const GateWindow& wu = seq.windows[seq.first_candidate];
  const double warmup_cpu = wu.after.process_cpu_s - wu.before.process_cpu_s;
  const double warmup_excess = std::max(0.0, warmup_cpu - 2.0 * run_cpu);  // a warm-up may cost up to two runs
  const double bound = std::max(0.2, S.untimed_work_fraction * run_cpu);
  const double device_bound = std::max(0.05, S.untimed_work_fraction * candidate_median_s);
  const double total = c.gaps_cpu + c.foreign_in_baseline + warmup_excess;
  UntimedWork u;
  u.report = {{"cpu_s", total},
              {"bound_s", bound},
              {"between_runs_cpu_s", c.gaps_cpu},
              {"harness_between_runs_cpu_s", c.harness_cpu},
              {"other_threads_in_baseline_runs_cpu_s", c.foreign_in_baseline},
              {"warmup_cpu_s", warmup_cpu},
              {"warmup_excess_cpu_s", warmup_excess},
              {"timed_run_cpu_s", run_cpu},
              {"device_queued_at_window_start_s", c.queued_device_s},
              {"device_bound_s", device_bound},
              {"threads",
               {{"reference", seq.threads_reference},
                {"harness_threads", seq.harness_threads},
                {"allowance", allowance},
                {"most_extra", c.worst_extra},
                {"census", c.threads}}}};
  if (c.worst_extra > allowance)
    u.problems.push_back("the candidate left " + std::to_string(c.worst_extra - allowance) +
                         " thread(s) running beyond the harness's own after its runs (" +
                         std::to_string(seq.threads_reference) + " after the baseline's warm-up, " +
                         std::to_string(seq.threads_reference + c.worst_extra) + " after '" + c.worst_after +
                         "'): work outside the timed windows");
  if (total > bound)
    u.problems.push_back(
        "untimed work: " + format_fixed(total, 3) + " s of CPU time outside the candidate's timed runs (" +
        format_fixed(c.foreign_in_baseline, 3) + " s by other threads during the baseline's runs, " +
        format_fixed(c.gaps_cpu, 3) + " s between runs, " + format_fixed(warmup_excess, 3) +
        " s of warm-up beyond two runs), bound " + format_fixed(bound, 3) + " s (" +
        format_fixed(S.untimed_work_fraction, 2) + " of a timed run's " + format_fixed(run_cpu, 3) + " s)");
  if (c.queued_device_s > device_bound)
    u.problems.push_back("untimed device work: " + format_fixed(c.queued_device_s, 3) +
                         " s of device work was still queued when timed windows began (bound " +
                         format_fixed(device_bound, 3) + " s)");
  audit_sandboxed_worker(seq, S, u);
  return u;
}

}  // namespace autooptim::gates
