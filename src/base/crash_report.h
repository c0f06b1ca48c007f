#pragma once
// A process that dies of a fault says where: on SIGSEGV, SIGBUS, SIGILL or SIGFPE a handler writes one line naming
// the signal and the process, then the stack's return addresses (module and offset: `addr2line -f -C -e BINARY
// OFFSET` names the function), to stderr, and the process dies of the same signal (its exit status unchanged).
namespace autooptim::base {

// Installs the handler for the whole process (idempotent). Call early in main.
void install_crash_report();

}  // namespace autooptim::base
