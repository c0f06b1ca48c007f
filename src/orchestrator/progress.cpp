#include "orchestrator/progress.h"

#include <algorithm>
#include <cstdio>

namespace autooptim::orchestrator {

void Progress::show(const std::string& phase, int64_t trial, int64_t trials, double best, const std::string& what) {
  line_.update("[" + phase + "]" + (what.empty() ? "" : " " + what), counters(trial, trials, best));
}

void Progress::warn(const std::string& msg) {
  line_.clear();
  log::warn(msg);
}

std::string Progress::counters(int64_t trial, int64_t trials, double best) const {
  const double left = std::max(0.0, left_s());
  char b[160];
  std::snprintf(b, sizeof b, "gate run %lld/%lld  best %.2fx  %dm%02ds left", static_cast<long long>(trial),
                static_cast<long long>(trials), best, static_cast<int>(left / 60), static_cast<int>(left) % 60);
  return b;
}

}  // namespace autooptim::orchestrator
