#include "base/crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <initializer_list>

namespace autooptim::base {
namespace {

void write_text(const char* s) {
  const ssize_t n = ::write(STDERR_FILENO, s, strlen(s));
  (void)n;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    default:
      return "?";
  }
}

// "module(+0xOFFSET)" of a code address, as backtrace_symbols_fd writes one (dladdr: fine in a dying process).
void write_address(const char* what, const void* a) {
  Dl_info info{};
  char line[512];
  if (a && ::dladdr(a, &info) && info.dli_fname)
    std::snprintf(line, sizeof line, "  %s %p = %s(+0x%lx)\n", what, a, info.dli_fname,
                  static_cast<unsigned long>(static_cast<const char*>(a) - static_cast<const char*>(info.dli_fbase)));
  else
    std::snprintf(line, sizeof line, "  %s %p\n", what, a);
  write_text(line);
}

// Where the fault happened, from the interrupted context: the instruction, the address it touched, and the code
// addresses found among the first words of its stack (what called it, where the unwinder cannot say: a call
// through a bad function pointer leaves no frame to unwind).
void write_context(const siginfo_t* info, const void* uc) {
  write_address("fault address", info ? info->si_addr : nullptr);
#if defined(__x86_64__)
  const auto* ctx = static_cast<const ucontext_t*>(uc);
  write_address("instruction", reinterpret_cast<const void*>(ctx->uc_mcontext.gregs[REG_RIP]));
  const auto* sp = reinterpret_cast<void* const*>(ctx->uc_mcontext.gregs[REG_RSP]);
  Dl_info d{};
  for (int k = 0, shown = 0; k < 64 && shown < 12; ++k)
    if (sp[k] && ::dladdr(sp[k], &d) && d.dli_fname) write_address("stack word", sp[k]), ++shown;
#else
  (void)uc;
#endif
}

// Async-signal-safe enough for a dying process: write(2), backtrace (its library preloaded at install), raise.
extern "C" void on_fault(int sig, siginfo_t* info, void* uc) {
  char head[160];
  // snprintf is not async-signal-safe in general; with these arguments glibc neither allocates nor locks.
  std::snprintf(head, sizeof head, "autooptim: fatal signal %d (%s) in process %d; its stack (module(+offset)):\n", sig,
                signal_name(sig), static_cast<int>(::getpid()));
  write_text(head);
  write_context(info, uc);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_crash_report() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc's unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace autooptim::base
