#include "runtime/blas_threads.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace autooptim::runtime {

std::string settle_blas_threads() {
  static std::once_flag once;
  static std::string what;
  std::call_once(once, [] {
    using SetThreads = void (*)(int);
    const auto set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (!set) {
      what = "no OpenBLAS";
      return;
    }
    if (const char* env = std::getenv("OPENBLAS_NUM_THREADS"); env && *env) {
      what = std::string("openblas: OPENBLAS_NUM_THREADS=") + env + " kept";
      return;
    }
    set(1);
    what = "openblas: 1 thread (libtorch's threads parallelise)";
  });
  return what;
}

}  // namespace autooptim::runtime
