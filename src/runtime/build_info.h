#pragma once
// What this binary is: its flavour (CPU or CUDA libtorch), the versions it was built against and runs
// with, and the git commit of its sources (recorded when the build was configured). --version prints
// it and every report carries it.
#include <string>

namespace autooptim::runtime {

struct BuildInfo {
  std::string version;     // the project's version
  std::string commit;      // git commit of the sources at configure time ("-dirty": local changes)
  std::string flavour;     // "CPU" or "CUDA"
  std::string libtorch;    // libtorch version compiled against
  std::string cuda;        // CUDA runtime version ("none" in a CPU build)
  std::string cudnn;       // cuDNN version libtorch uses ("none" when absent)
  std::string driver;      // CUDA driver version ("none" without a GPU driver)
  std::string build_type;  // CMake build type
};

const BuildInfo& build_info();
// One line per fact, for --version.
std::string build_info_text();
// True when the build has CUDA parts (a CUDA libtorch).
bool built_with_cuda();

}  // namespace autooptim::runtime
