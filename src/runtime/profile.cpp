#include "runtime/profile.h"

#include "runtime/device.h"
#include "base/error.h"

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
  if (used_ > 0) {  // the interval that ends here (before the new mark)
    owner_[used_ - 1] = stack_.empty() ? "other" : stack_.back().category;
    owner_detail_[used_ - 1] = stack_.empty() ? std::string() : stack_.back().detail;
  }
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
  if (owner_.size() <= used_) {
    owner_.resize(used_ + 1);
    owner_detail_.resize(used_ + 1);
  }
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
  stack_.push_back({category, {}});
}

void Profiler::push(const char* category, ProfileDetail detail) {
  mark();
  std::string key = std::string(category) + ": " + detail.key;
  auto& d = details_[key];
  ++d.calls;
  d.flops += detail.flops;
  d.bytes += detail.bytes;
  stack_.push_back({category, std::move(key)});
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
    if (!owner_detail_[i].empty()) details_[owner_detail_[i]].ms += ms;
  }
  ++regions_;
}

namespace {
std::string dims(at::IntArrayRef d, const char* sep) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? sep : "") + std::to_string(d[i]);
  return s;
}
}  // namespace

ProfileDetail gemm_detail(const at::Tensor& in, int64_t n_out) {
  const int64_t K = in.size(-1), M = K > 0 ? in.numel() / K : 0;
  return {"[" + std::to_string(M) + " x " + std::to_string(K) + "] x [" + std::to_string(K) + " x " +
              std::to_string(n_out) + "] " + std::string(c10::toString(in.scalar_type())),
          2.0 * static_cast<double>(M) * K * n_out};
}

ProfileDetail conv_detail(const at::Tensor& in, const at::Tensor& weight, at::IntArrayRef stride,
                          at::IntArrayRef padding) {
  const int64_t nd = weight.dim() - 2;  // spatial dimensions
  double out_elems = static_cast<double>(in.size(0)) * weight.size(0);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t s = i < static_cast<int64_t>(stride.size()) ? stride[i] : 1;
    const int64_t p = i < static_cast<int64_t>(padding.size()) ? padding[i] : 0;
    out.push_back((in.size(2 + i) + 2 * p - weight.size(2 + i)) / s + 1);
    out_elems *= static_cast<double>(out.back());
  }
  double taps = static_cast<double>(weight.size(1));
  for (int64_t i = 0; i < nd; ++i) taps *= static_cast<double>(weight.size(2 + i));
  const bool cl = in.dim() == 5 && in.is_contiguous(at::MemoryFormat::ChannelsLast3d) && !in.is_contiguous();
  return {std::to_string(weight.size(1)) + "->" + std::to_string(weight.size(0)) + " k" +
              dims(weight.sizes().slice(2), "x") + " s" + dims(stride, "x") + " out " + dims(out, "x") +
              (cl ? " cl" : "") + " " + std::string(c10::toString(in.scalar_type())),
          2.0 * out_elems * taps};
}

}  // namespace autooptim::runtime
