#pragma once
// The kernel's clocks (clock_gettime): this process's CPU time, what the gate's defences and the runtime's
// stage times read beside the wall clock.
#include <time.h>

namespace autooptim::base {

double clock_seconds(clockid_t id);  // any clock of clock_gettime, in seconds; < 0 on failure

double process_cpu_seconds();  // CLOCK_PROCESS_CPUTIME_ID: every thread, living or exited; < 0 on failure
double thread_cpu_seconds();   // CLOCK_THREAD_CPUTIME_ID: the calling thread

}  // namespace autooptim::base
