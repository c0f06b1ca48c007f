#include "base/utc_time.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace autooptim::base {

std::string utc_timestamp() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t seconds = system_clock::to_time_t(now);
  const auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &utc);
  char out[40];
  std::snprintf(out, sizeof(out), "%s.%03dZ", text, int(millis));
  return out;
}

}  // namespace autooptim::base
