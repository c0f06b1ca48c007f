#pragma once
// The CPU BLAS's own thread pool, next to libtorch's. Debian's libtorch calls OpenBLAS (pthreads build) for
// its GEMMs and convolutions' im2col products; OpenBLAS then starts its own threads, which spin (sched_yield)
// against libtorch's OpenMP threads on the same cores; on a 2-core machine that made single runs vary widely
// (docs/journal/2026-12-04.md), which the gate's noise margins then have to absorb. libtorch parallelises itself, so
// the BLAS runs single-threaded inside each op unless the user set OPENBLAS_NUM_THREADS.
#include <string>

namespace autooptim::runtime {

// Sets OpenBLAS to one thread when it is the loaded BLAS and OPENBLAS_NUM_THREADS is not set; idempotent.
// Returns what was done, for logs ("openblas: 1 thread", "openblas: OPENBLAS_NUM_THREADS=4 kept",
// "no OpenBLAS").
std::string settle_blas_threads();

}  // namespace autooptim::runtime
