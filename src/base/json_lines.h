#pragma once
// Reading a JSON-lines file that another process may still be appending to (an executor's trials, an
// agent's tool calls) or that a killed process left behind.
#include <cstddef>
#include <filesystem>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

namespace autooptim::base {

// The JSON values of the file's lines in file order, at most `max`. A line that does not parse is skipped
// wherever it is: the torn last line of a writer caught mid-row, a blank line, and a malformed line in the
// middle alike (these files are records read for a report or a lookup, and one bad row must not hide the
// others). A last line that lacks only its newline still parses and is kept. A missing or unreadable file
// gives none. Values are returned as they parse: a caller that needs objects checks.
std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& path,
                                            size_t max = std::numeric_limits<size_t>::max());

}  // namespace autooptim::base
