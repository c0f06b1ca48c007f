#include "base/json_lines.h"

#include <fstream>
#include <string>

namespace autooptim::base {

std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& path, size_t max) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (rows.size() < max && std::getline(in, line)) {
    try {
      rows.push_back(nlohmann::json::parse(line));
    } catch (const std::exception&) {
      // a torn or malformed line: skipped (see the header)
    }
  }
  return rows;
}

}  // namespace autooptim::base
