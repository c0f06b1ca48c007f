#pragma once
// The refusal: a manifest already rejected in this environment is not run again under a cosmetic change.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gates/gate_check.h"

namespace autooptim::gates {

// The first ledger row that rejected this manifest hash on this split in the same environment (with a
// failure signature; not itself a refusal), if any.
std::optional<nlohmann::json> find_rejection(const std::vector<nlohmann::json>& rows, const std::string& manifest_hash,
                                             const std::string& split,
                                             const std::function<bool(const nlohmann::json&)>& same_environment);

// The failing "refused" check that the rejection gives a retry.
GateCheck check_refused(const nlohmann::json& rejection, const std::string& manifest_hash);

}  // namespace autooptim::gates
