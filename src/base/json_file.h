#pragma once
// The one way a JSON record reaches disk: pretty-printed, newline-terminated, written atomically
// (base/atomic_file.h), so a reader sees the old record or the whole new one.
#include <string>

#include <nlohmann/json.hpp>

namespace autooptim::base {

// Throws Error naming `path` when it cannot be written.
void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace autooptim::base
