#include "runtime/device.h"

#include <fstream>

#ifdef AUTOOPTIM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>
#endif

namespace autooptim::runtime {

bool cuda_available() {
#ifdef AUTOOPTIM_WITH_CUDA
  return at::hasCUDA() && at::cuda::device_count() > 0;
#else
  return false;
#endif
}

void device_synchronize(const at::Device& device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device.is_cuda()) cudaDeviceSynchronize();
#else
  (void)device;
#endif
}

double synced_seconds_since(const std::chrono::steady_clock::time_point& t0, const at::Device& device) {
  device_synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

DeviceTimer::DeviceTimer(const at::Device& device) : device_(device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device_.is_cuda()) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    start_event_ = a;
    stop_event_ = b;
  }
#endif
}

DeviceTimer::~DeviceTimer() {
#ifdef AUTOOPTIM_WITH_CUDA
  if (start_event_) cudaEventDestroy(static_cast<cudaEvent_t>(start_event_));
  if (stop_event_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_event_));
#endif
}

void DeviceTimer::start() {
#ifdef AUTOOPTIM_WITH_CUDA
  if (start_event_) {
    cudaEventRecord(static_cast<cudaEvent_t>(start_event_), at::cuda::getCurrentCUDAStream());
    return;
  }
#endif
  t0_ = std::chrono::steady_clock::now();
}

double DeviceTimer::stop_seconds() {
#ifdef AUTOOPTIM_WITH_CUDA
  if (stop_event_) {
    cudaEventRecord(static_cast<cudaEvent_t>(stop_event_), at::cuda::getCurrentCUDAStream());
    cudaEventSynchronize(static_cast<cudaEvent_t>(stop_event_));
    float ms = 0;
    cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_event_), static_cast<cudaEvent_t>(stop_event_));
    return ms / 1000.0;
  }
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void set_strict_fp32(bool strict) {
  if (strict) at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(!strict);
}

void reset_peak_memory(const at::Device& device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
#else
  (void)device;
#endif
}

int64_t peak_memory_bytes(const at::Device& device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    // Index 0 is StatType::AGGREGATE (all pools); the enum moved between namespaces across 2.x.
    return stats.allocated_bytes[0].peak;
  }
#else
  (void)device;
#endif
  return 0;
}

int64_t current_memory_bytes(const at::Device& device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    return stats.allocated_bytes[0].current;
  }
#else
  (void)device;
#endif
  return 0;
}

std::string device_name(const at::Device& device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device.index() < 0 ? 0 : device.index());
    return prop.name;
  }
#else
  (void)device;
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "cpu";
}

std::string gpu_clocks(const at::Device& device) {
#ifdef AUTOOPTIM_WITH_CUDA
  if (device.is_cuda()) {
    int sm = 0, mem = 0;
    const int idx = device.index() < 0 ? 0 : device.index();
    cudaDeviceGetAttribute(&sm, cudaDevAttrClockRate, idx);
    cudaDeviceGetAttribute(&mem, cudaDevAttrMemoryClockRate, idx);
    return "sm " + std::to_string(sm / 1000) + " MHz max, memory " + std::to_string(mem / 1000) + " MHz";
  }
#else
  (void)device;
#endif
  return "";
}

}  // namespace autooptim::runtime
