#pragma once
// Device services that differ between CPU-only and CUDA builds: synchronisation, event timing, peak
// memory, device names. CPU builds compile the same API with host fallbacks.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace autooptim::runtime {

bool cuda_available();
void device_synchronize(const at::Device& device);
// Seconds since t0, after waiting for the device's queued work.
double synced_seconds_since(const std::chrono::steady_clock::time_point& t0, const at::Device& device);

// Times a region on the device: CUDA events on GPUs, a synchronised steady clock on the CPU.
class DeviceTimer {
 public:
  explicit DeviceTimer(const at::Device& device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start();
  double stop_seconds();  // synchronises

 private:
  at::Device device_;
  std::chrono::steady_clock::time_point t0_;
  void* start_event_ = nullptr;
  void* stop_event_ = nullptr;
};

// IEEE float32 in cuBLAS and cuDNN (no TF32), for golden checks; libtorch's default lets cuDNN
// convolutions use TF32, which is what the reference's fp32 timings ran with.
void set_strict_fp32(bool strict);

void reset_peak_memory(const at::Device& device);
int64_t peak_memory_bytes(const at::Device& device);     // 0 on the CPU
int64_t current_memory_bytes(const at::Device& device);  // allocated now; 0 on the CPU
std::string device_name(const at::Device& device);       // GPU model, or the CPU model from /proc/cpuinfo
std::string gpu_clocks(const at::Device& device);        // SM/memory clocks where the driver tells them

}  // namespace autooptim::runtime
