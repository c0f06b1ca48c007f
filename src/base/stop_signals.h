#pragma once
// The one place SIGINT and SIGTERM are caught. A long-running process (the orchestrator, an executor)
// asks to be told of a stop request instead of dying, so it can finish or hand over what it has.
#include <csignal>

namespace autooptim::base {

// Routes SIGINT and SIGTERM to `handler` (async-signal-safe code only) and unblocks them. With
// `once`, the handler is reset after the first signal (SA_RESETHAND), so a second ^C kills a stuck
// process.
void catch_stop_signals(void (*handler)(int), bool once);

// Catches SIGINT/SIGTERM for its lifetime and remembers the last one; restores the previous handlers.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal received since construction, or 0.
  static int signal();

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

}  // namespace autooptim::base
