#pragma once
// The kernel's CPU-time clocks of this process (clock_gettime): what the gate's defences and the runtime's
// stage times read beside the wall clock.

namespace autooptim::base {

double process_cpu_seconds();  // CLOCK_PROCESS_CPUTIME_ID: every thread, living or exited; < 0 on failure
double thread_cpu_seconds();   // CLOCK_THREAD_CPUTIME_ID: the calling thread

}  // namespace autooptim::base
