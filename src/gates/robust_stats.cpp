#include "gates/robust_stats.h"

#include <cmath>
#include <utility>

#include "base/stats.h"

namespace autooptim::gates {

double median_of(std::vector<double> v) { return runtime::TimingStats::of(std::move(v)).median; }

double robust_noise(const std::vector<double>& v) {
  const double m = median_of(v);
  if (v.size() < 2 || m <= 0) return 0.0;
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 1.4826 * median_of(dev) / m;
}

}  // namespace autooptim::gates
