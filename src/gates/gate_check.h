#pragma once
// One named check of a gate verdict: pass or fail, the reason, and what it measured.
#include <nlohmann/json.hpp>
#include <string>

namespace autooptim::gates {

struct GateCheck {
  std::string name;
  bool pass = false;
  std::string reason;
  nlohmann::json details = nlohmann::json::object();
};

}  // namespace autooptim::gates
