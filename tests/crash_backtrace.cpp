// Linked into every test executable: a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) prints the test it
// happened in (or "outside any test": static destruction at exit) and a backtrace to stderr before the
// process dies with the same signal. Without it a crash on the GPU machine leaves only ctest's "SegFault"
// and a cut-off stdout (the buffered rest is lost), as GateGpu.HonestFullSizeCandidateLeavesNothingUntimed
// did on 2026-12-03. Async-signal safety is best effort: the process is dying anyway.
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <execinfo.h>
#include <unistd.h>

namespace {

void write_str(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

void on_crash(int sig) {
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
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  ::raise(sig);
}

const bool installed = [] {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_crash);
  return true;
}();

}  // namespace
