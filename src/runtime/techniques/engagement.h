#pragma once
// The authenticity check's runtime side: for the switches a RuntimeOptions turns on, which counters of
// the trace must show engagement. One place, next to the techniques that write those counters.
#include <string>
#include <vector>

#include "runtime/options.h"
#include "runtime/trace.h"

namespace autooptim::runtime {

// One message per switch that is on but left no (or inconsistent) trace of engagement.
std::vector<std::string> engagement_problems(const RuntimeOptions& o, const Trace& t);

}  // namespace autooptim::runtime
