#include "runtime/profile.h"

#include "runtime/device.h"
#include "runtime/error.h"

#ifdef AUTOOPTIM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#endif

namespace autooptim::runtime {
namespace {
thread_local Profiler* g_current = nullptr;
}

Profiler* Profiler::current() { return g_current; }

Profiler::Profiler(const at::Device& device) : device_(device) {}

Profiler::~Profiler() {
  if (g_current == this) g_current = nullptr;
#ifdef AUTOOPTIM_WITH_CUDA
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
}

void Profiler::mark() {
  const std::string who = stack_.empty() ? "other" : stack_.back();
  if (used_ > 0) owner_[used_ - 1] = who;  // the interval that ends here (before the new mark)
#ifdef AUTOOPTIM_WITH_CUDA
  if (device_.is_cuda()) {
    if (used_ == events_.size()) {
      cudaEvent_t e;
      if (cudaEventCreate(&e) != cudaSuccess) throw Error("profiler: cudaEventCreate failed");
      events_.push_back(e);
    }
    cudaEventRecord(static_cast<cudaEvent_t>(events_[used_]), at::cuda::getCurrentCUDAStream());
  }
#endif
  if (!device_.is_cuda()) {
    if (used_ == clocks_.size()) clocks_.emplace_back();
    clocks_[used_] = std::chrono::steady_clock::now();
  }
  if (owner_.size() <= used_) owner_.resize(used_ + 1);
  ++used_;
}

void Profiler::start() {
  if (g_current && g_current != this) throw Error("profiler: another profiler is active on this thread");
  g_current = this;
  used_ = 0;
  stack_.clear();
  mark();
}

void Profiler::push(const char* category) {
  mark();  // closes the interval of the enclosing category
  stack_.push_back(category);
}

void Profiler::pop() {
  mark();  // closes this category's interval
  if (!stack_.empty()) stack_.pop_back();
}

void Profiler::stop() {
  stack_.clear();
  mark();
  g_current = nullptr;
  device_synchronize(device_);
  // The interval ending at mark i+1 was owned by whatever was open when mark i+1 was recorded:
  // owner_[i] holds exactly that (set in mark() when mark i+1 was made).
  for (size_t i = 0; i + 1 < used_; ++i) {
    double ms = 0;
#ifdef AUTOOPTIM_WITH_CUDA
    if (device_.is_cuda()) {
      float f = 0;
      cudaEventElapsedTime(&f, static_cast<cudaEvent_t>(events_[i]), static_cast<cudaEvent_t>(events_[i + 1]));
      ms = f;
    }
#endif
    if (!device_.is_cuda()) ms = std::chrono::duration<double, std::milli>(clocks_[i + 1] - clocks_[i]).count();
    totals_[owner_[i]] += ms;
  }
  ++regions_;
}

}  // namespace autooptim::runtime
