#include "runtime/build_info.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include <sstream>

#ifdef AUTOOPTIM_WITH_CUDA
#include <cuda_runtime.h>
#endif

#ifndef AUTOOPTIM_GIT_COMMIT
#define AUTOOPTIM_GIT_COMMIT "unknown"
#endif
#ifndef AUTOOPTIM_VERSION
#define AUTOOPTIM_VERSION "0.1.0"
#endif
#ifndef AUTOOPTIM_BUILD_TYPE
#define AUTOOPTIM_BUILD_TYPE "unknown"
#endif

namespace autooptim::runtime {
namespace {

// 12345 (CUDA's major*1000 + minor*10) -> "12.3"; cuDNN 90190 -> "9.19.0" (its major*10000 scheme since 9).
std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
std::string cudnn_version_text(long v) {
  if (v >= 90000)
    return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
}

BuildInfo collect() {
  BuildInfo b;
  b.version = AUTOOPTIM_VERSION;
  b.commit = AUTOOPTIM_GIT_COMMIT;
  b.build_type = AUTOOPTIM_BUILD_TYPE;
  b.libtorch = TORCH_VERSION;
  b.cuda = b.cudnn = b.driver = "none";
#ifdef AUTOOPTIM_WITH_CUDA
  b.flavour = "CUDA";
  int rt = 0, drv = 0;
  b.cuda = std::string("built ") + cuda_version_text(CUDART_VERSION);
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) b.cuda += ", runtime " + cuda_version_text(rt);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) b.driver = cuda_version_text(drv);
  try {
    const auto& hooks = at::detail::getCUDAHooks();
    if (hooks.compiledWithCuDNN()) b.cudnn = cudnn_version_text(hooks.versionCuDNN());
  } catch (const std::exception&) {
    b.cudnn = "unknown";
  }
#else
  b.flavour = "CPU";
#endif
  return b;
}

}  // namespace

const BuildInfo& build_info() {
  static const BuildInfo b = collect();
  return b;
}

bool built_with_cuda() {
#ifdef AUTOOPTIM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string build_info_text() {
  const auto& b = build_info();
  std::ostringstream o;
  o << "autooptim " << b.version << " (" << b.flavour << " build, " << b.build_type << ")\n"
    << "commit    " << b.commit << "\n"
    << "libtorch  " << b.libtorch << "\n"
    << "CUDA      " << b.cuda << "\n"
    << "cuDNN     " << b.cudnn << "\n"
    << "driver    " << b.driver << "\n";
  if (b.flavour == "CPU") o << "(a CPU build: wan22-ti2v-5b needs the GPU build, see README \"GPU build\")\n";
  return o.str();
}

}  // namespace autooptim::runtime
