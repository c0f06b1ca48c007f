#pragma once
// A timed request decided inside its window: one of the prompts and a seed, drawn from std::random_device once
// the timer has started, so nothing before the window can know what it will be asked. The seed is never the
// manifest's own (the split's clips use that one). Used wherever a timed generation starts: this process's worker
// (gates/worker.h) and a plugin's sandboxed worker (gates/sandboxed_worker.h).
#include <cstdint>
#include <vector>

#include "gates/prompts.h"

namespace autooptim::gates {

struct DrawnRequest {
  Prompt prompt;
  int64_t seed = 0;
};

// `choices` must not be empty.
DrawnRequest draw_request(const std::vector<Prompt>& choices, int64_t official_seed);

}  // namespace autooptim::gates
