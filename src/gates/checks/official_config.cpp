#include "gates/checks/official_config.h"

namespace autooptim::gates {

GateCheck check_official_config(const RunConfig& candidate, const RunConfig& official) {
  GateCheck g{"official_config",
              candidate == official,
              "",
              {{"official", to_json(official)}, {"candidate", to_json(candidate)}}};
  g.reason = g.pass ? "the official setting"
                    : "config differs from the official setting (measured, but it can never win a tier)";
  return g;
}

}  // namespace autooptim::gates
