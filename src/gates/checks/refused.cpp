#include "gates/checks/refused.h"

namespace autooptim::gates {

std::optional<nlohmann::json> find_rejection(const std::vector<nlohmann::json>& rows, const std::string& manifest_hash,
                                             const std::string& split,
                                             const std::function<bool(const nlohmann::json&)>& same_environment) {
  for (const auto& row : rows)
    if (row.value("manifest_hash", "") == manifest_hash && same_environment(row) && row.value("split", "") == split &&
        !row.value("accepted", true) && !row.value("refused", false) && !row.value("failure_signature", "").empty())
      return row;
  return std::nullopt;
}

GateCheck check_refused(const nlohmann::json& rejection, const std::string& manifest_hash) {
  return {"refused", false,
          "manifest " + manifest_hash.substr(0, 12) + " was already rejected on this build (" +
              rejection.value("failure_signature", "") + ", as '" + rejection.value("manifest", "") +
              "'); a retry that changes only cosmetics is refused"};
}

}  // namespace autooptim::gates
