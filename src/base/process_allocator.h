#pragma once
// The C allocator's thresholds, fixed for the whole process. glibc serves a large allocation with its own
// mmap and, by default, raises that threshold (and the heap's trim threshold) each time such a block is
// freed. So the cost of every later tensor allocation depended on what the process had done before: a
// process whose first work was a full-length text encoding kept its buffers in the heap, one that began
// with a trimmed encoding mapped and unmapped (and page-faulted) the transformer's activations every step,
// and ran its denoising twice as slowly (docs/runtime.md, "One process, one allocator"). Fixing the
// thresholds makes a generation cost the same in `generate`, a gate run and a worker, whatever came first.
#include <string>

namespace autooptim::runtime {

// Fixes glibc's mmap threshold at its largest dynamic value and the trim threshold above it; idempotent.
// Returns what was done, for logs and the gate environment ("glibc: mmap 32 MiB, trim 256 MiB").
std::string settle_allocator();

}  // namespace autooptim::runtime
