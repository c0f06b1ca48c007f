// Linked into every test executable: a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints the test it
// happened in (or "outside any test": static destruction at exit) and a backtrace to stderr before the
// process dies with the same signal. Without it a crash on the GPU machine leaves only ctest's "SegFault"
// and a cut-off stdout (the buffered rest is lost), as GateGpu.HonestFullSizeCandidateLeavesNothingUntimed
// did on 2026-12-03. Async-signal safety is best effort: the process is dying anyway.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

namespace {

void write_str(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

void write_hex(const char* label, uintptr_t v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s0x%zx", label, static_cast<size_t>(v));
  write_str(buf);
}

// Where the fault was: the faulting address, the instruction and stack pointers, the thread, and the code
// addresses found on the stack (named where dladdr can). backtrace() cannot unwind through a frame without
// unwind tables (a call through a dangling pointer, driver code): the stack scan still shows the callers.
void write_context(const siginfo_t* si, void* uctx) {
  write_hex("fault address ", reinterpret_cast<uintptr_t>(si ? si->si_addr : nullptr));
  write_hex("  thread ", static_cast<uintptr_t>(::syscall(SYS_gettid)));
  write_hex(" (process ", static_cast<uintptr_t>(::getpid()));
  write_str(")\n");
#if defined(__x86_64__)
  if (!uctx) return;
  const auto* uc = static_cast<const ucontext_t*>(uctx);
  const uintptr_t rip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const uintptr_t rsp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  write_hex("rip ", rip);
  write_hex("  rsp ", rsp);
  write_str("\n");
  const auto name = [](uintptr_t a) {
    Dl_info d{};
    if (::dladdr(reinterpret_cast<void*>(a), &d) == 0 || !d.dli_fname) return false;
    char buf[512];
    // Unnamed (not exported) code: the offset in its file, for addr2line -e FILE OFFSET.
    if (d.dli_sname)
      std::snprintf(buf, sizeof buf, "  0x%zx %s(%s+0x%zx)\n", static_cast<size_t>(a), d.dli_fname, d.dli_sname,
                    static_cast<size_t>(a - reinterpret_cast<uintptr_t>(d.dli_saddr)));
    else
      std::snprintf(buf, sizeof buf, "  0x%zx %s(+0x%zx)\n", static_cast<size_t>(a), d.dli_fname,
                    static_cast<size_t>(a - reinterpret_cast<uintptr_t>(d.dli_fbase)));
    write_str(buf);
    return true;
  };
  write_str("at:\n");
  name(rip);
  write_str("code addresses on the stack (callers, innermost first):\n");
  const auto* sp = reinterpret_cast<const uintptr_t*>(rsp);
  int shown = 0;
  for (int i = 0; i < 4096 && shown < 100; ++i) {
    const uintptr_t w = sp[i];
    if (w >= 0x400000 && name(w)) ++shown;
  }
#else
  (void)uctx;
#endif
}

void on_crash(int sig, siginfo_t* si, void* uctx) {
  write_str("\n*** test process crashed: ");
  write_str(strsignal(sig));
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info) {
    write_str(" in ");
    write_str(info->test_suite_name());
    write_str(".");
    write_str(info->name());
  } else {
    write_str(" outside any test (set-up, or static destruction at exit)");
  }
  write_str("\n");
  write_context(si, uctx);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  ::raise(sig);
}

const bool installed = [] {
  struct sigaction sa {};
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
  return true;
}();

}  // namespace
