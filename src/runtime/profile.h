#pragma once
// Where a region's time goes, by category: `bench --profile` wraps one transformer forward and one VAE
// decode in a Profiler, and the model code marks its operations with ProfileScope. A scope records a
// device event at each transition (CUDA events on the GPU, a steady clock on the CPU, where libtorch runs
// synchronously), so the time between two transitions belongs to the innermost open category and the
// categories add up to the whole region; time outside every scope is "other". With no Profiler active a
// scope costs one thread-local read.
#include <ATen/ATen.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace autooptim::runtime {

class Profiler {
 public:
  explicit Profiler(const at::Device& device);
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts a region on the calling thread (this profiler becomes current) and ends it (waits for the
  // device and adds the region's times to the totals). Regions may repeat; the totals accumulate.
  void start();
  void stop();
  void push(const char* category);
  void pop();

  // Accumulated milliseconds per category over all regions, and the number of regions.
  const std::map<std::string, double>& totals_ms() const { return totals_; }
  int regions() const { return regions_; }
  static Profiler* current();

 private:
  void mark();
  at::Device device_;
  std::vector<void*> events_;  // a reusable pool (CUDA builds)
  std::vector<std::chrono::steady_clock::time_point> clocks_;
  std::vector<std::string> owner_;  // owner_[i]: category of the interval that ends at mark i
  std::vector<const char*> stack_;
  size_t used_ = 0;
  std::map<std::string, double> totals_;
  int regions_ = 0;
};

// Marks the enclosed operations as one category of the current profiler, if any.
class ProfileScope {
 public:
  explicit ProfileScope(const char* category) : p_(Profiler::current()) {
    if (p_) p_->push(category);
  }
  ~ProfileScope() {
    if (p_) p_->pop();
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profiler* p_;
};

}  // namespace autooptim::runtime
