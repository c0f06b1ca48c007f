#pragma once
// Where a region's time goes, by category: `bench --profile` wraps one transformer forward and one VAE
// decode in a Profiler, and the model code marks its operations with ProfileScope. A scope records a
// device event at each transition (CUDA events on the GPU, a steady clock on the CPU, where libtorch runs
// synchronously), so the time between two transitions belongs to the innermost open category and the
// categories add up to the whole region; time outside every scope is "other". With no Profiler active a
// scope costs one thread-local read.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace autooptim::runtime {

// One operation's finer key under its category (a convolution's shapes, a GEMM's, which attention),
// with the floating-point operations of one call, for `bench --profile-detail`, or, for a memory-bound
// operation, the bytes it must move at least (each input read once, each output written once).
struct ProfileDetail {
  std::string key;
  double flops = 0;
  double bytes = 0;
};

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
  void push(const char* category, ProfileDetail detail);
  void pop();

  // Detail mode: scopes that can say more (ProfileScope with a detail function) are also summed per
  // detail key, with their calls and FLOPs. Off by default (building the keys costs host time).
  void set_detailed(bool on) { detailed_ = on; }
  bool detailed() const { return detailed_; }
  struct DetailTotal {
    double ms = 0;
    int64_t calls = 0;
    double flops = 0;
    double bytes = 0;
  };

  // Accumulated milliseconds per category over all regions, and the number of regions.
  const std::map<std::string, double>& totals_ms() const { return totals_; }
  // Per "category: detail" key (detail mode only), accumulated over all regions.
  const std::map<std::string, DetailTotal>& detail_totals() const { return details_; }
  int regions() const { return regions_; }
  static Profiler* current();

 private:
  void mark();
  at::Device device_;
  std::vector<void*> events_;  // a reusable pool (CUDA builds)
  std::vector<std::chrono::steady_clock::time_point> clocks_;
  struct Open {
    const char* category;
    std::string detail;  // "category: key", or empty
  };
  std::vector<std::string> owner_;         // owner_[i]: category of the interval that ends at mark i
  std::vector<std::string> owner_detail_;  // and its detail key, or empty
  std::vector<Open> stack_;
  size_t used_ = 0;
  bool detailed_ = false;
  std::map<std::string, double> totals_;
  std::map<std::string, DetailTotal> details_;
  int regions_ = 0;
};

// Detail keys: a GEMM of `in` ([..., K], rows M) by a weight of n_out outputs; a convolution of `in`
// by `weight` ([Cout, Cin, k...]) with the given stride and padding (the spatial dimensions' output
// sizes from the usual formula); their FLOPs are 2 multiply-adds' worth per output element and tap.
ProfileDetail gemm_detail(const at::Tensor& in, int64_t n_out);
ProfileDetail conv_detail(const at::Tensor& in, const at::Tensor& weight, at::IntArrayRef stride,
                          at::IntArrayRef padding);

// Marks the enclosed operations as one category of the current profiler, if any.
class ProfileScope {
 public:
  explicit ProfileScope(const char* category) : p_(Profiler::current()) {
    if (p_) p_->push(category);
  }
  // detail: a callable returning a ProfileDetail, called only when the current profiler is detailed.
  template <typename DetailFn>
  ProfileScope(const char* category, DetailFn&& detail) : p_(Profiler::current()) {
    if (!p_) return;
    if (p_->detailed())
      p_->push(category, detail());
    else
      p_->push(category);
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
