#include "base/stop_signals.h"

namespace autooptim::base {
namespace {

volatile sig_atomic_t g_signal = 0;
extern "C" void remember_signal(int sig) { g_signal = sig; }

struct sigaction handler_action(void (*handler)(int), bool once) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = once ? SA_RESETHAND : 0;
  return sa;
}

}  // namespace

void catch_stop_signals(void (*handler)(int), bool once) {
  const struct sigaction sa = handler_action(handler, once);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_UNBLOCK, &stop, nullptr);
}

StopSignals::StopSignals() {
  g_signal = 0;
  const struct sigaction sa = handler_action(remember_signal, true);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int StopSignals::signal() { return g_signal; }

}  // namespace autooptim::base
