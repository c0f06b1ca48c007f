#include "base/process_allocator.h"

#include <malloc.h>

#include <mutex>

namespace autooptim::runtime {

std::string settle_allocator() {
  static std::once_flag once;
  static std::string what;
  std::call_once(once, [] {
#if defined(__GLIBC__)
    // 32 MiB is glibc's ceiling for the dynamic threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): the state a
    // long-lived process reached anyway after its first large free. Setting it turns the adjustment off.
    constexpr int kMmapThreshold = 32 << 20, kTrimThreshold = 256 << 20;
    const bool ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
    what = ok ? "glibc: mmap threshold 32 MiB, trim threshold 256 MiB"
              : "glibc: mallopt refused (thresholds left dynamic)";
#else
    what = "not glibc: allocator left as it is";
#endif
  });
  return what;
}

}  // namespace autooptim::runtime
