#include "base/json_file.h"

#include "base/atomic_file.h"

namespace autooptim::base {

void write_json_file(const std::string& path, const nlohmann::json& value) {
  gates::write_file_atomic(path, value.dump(2) + "\n");
}

}  // namespace autooptim::base
