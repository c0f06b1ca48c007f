#pragma once
// The one timestamp format of records, logs and reports.
#include <string>

namespace autooptim::base {

// Now, UTC, to the millisecond: "2026-12-06T07:37:03.123Z".
std::string utc_timestamp();

}  // namespace autooptim::base
