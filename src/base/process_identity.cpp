#include "base/process_identity.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace autooptim::base {

std::string host_name() {
  char b[256] = {0};
  if (gethostname(b, sizeof b - 1) != 0) return "?";
  return b;
}

uint64_t process_start_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces: count fields after its last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  char state = 0;
  rest >> state;  // field 3
  if (state == 'Z' || state == 'X') return 0;
  for (int f = 4; f <= 21 && rest >> field; ++f) {
  }
  uint64_t ticks = 0;
  rest >> ticks;  // field 22
  return ticks;
}

bool same_process_alive(pid_t pid, uint64_t start_ticks) {
  return pid > 0 && start_ticks != 0 && process_start_ticks(pid) == start_ticks;
}

}  // namespace autooptim::base
