#pragma once
// The authenticity check's runtime side: for the switches a RuntimeOptions turns on, which counters of
// the trace must show engagement: what each technique declares in the registry (techniques/registry.h).
#include <string>
#include <vector>

#include "runtime/options.h"
#include "runtime/trace.h"

namespace autooptim::runtime {

// One message per switch that is on but left no (or inconsistent) trace of engagement.
std::vector<std::string> engagement_problems(const RuntimeOptions& o, const Trace& t);

}  // namespace autooptim::runtime
