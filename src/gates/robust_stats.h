#pragma once
// The gate's summaries of a few repeated measurements.
#include <vector>

namespace autooptim::gates {

double median_of(std::vector<double> v);
// Relative noise that one disturbed run does not inflate: 1.4826 x the median absolute deviation over
// the median (the standard deviation's estimate for normal noise).
double robust_noise(const std::vector<double>& v);

}  // namespace autooptim::gates
