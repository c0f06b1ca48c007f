#pragma once
// Summary statistics of repeated timings: median and spread, never a single lucky run.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace autooptim::runtime {

struct TimingStats {
  std::vector<double> runs;
  double median = 0, min = 0, max = 0;
  double spread() const { return median > 0 ? (max - min) / median : 0.0; }  // relative range

  static TimingStats of(std::vector<double> runs) {
    TimingStats s;
    s.runs = runs;
    if (runs.empty()) return s;
    std::sort(runs.begin(), runs.end());
    const size_t n = runs.size();
    s.median = n % 2 ? runs[n / 2] : 0.5 * (runs[n / 2 - 1] + runs[n / 2]);
    s.min = runs.front();
    s.max = runs.back();
    return s;
  }
  nlohmann::json to_json() const {
    return {{"median_s", median}, {"min_s", min}, {"max_s", max}, {"spread", spread()}, {"runs_s", runs}};
  }
};

}  // namespace autooptim::runtime
