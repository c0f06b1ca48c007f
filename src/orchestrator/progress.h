#pragma once
// The run's progress: a live line on a terminal, plain lines in a log file (base/log.h), with the gate
// runs so far, the best accepted speedup and the time left of --budget-minutes.
#include <chrono>
#include <cstdint>
#include <string>

#include "base/log.h"

namespace autooptim::orchestrator {

using Clock = std::chrono::steady_clock;

class Progress {
 public:
  Progress(Clock::time_point start, double budget_s) : start_(start), budget_s_(budget_s) {}
  void show(const std::string& phase, int64_t trial, int64_t trials, double best, const std::string& what = "");
  void line(const std::string& msg) { line_.event(msg); }
  void warn(const std::string& msg);
  void clear() { line_.clear(); }
  // Seconds of the budget left (negative once it is spent).
  double left_s() const { return budget_s_ - std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  std::string counters(int64_t trial, int64_t trials, double best) const;
  Clock::time_point start_;
  double budget_s_;
  log::Progress line_;
};

}  // namespace autooptim::orchestrator
