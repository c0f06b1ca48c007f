#include "gates/gate_model_facts.h"

namespace autooptim::gates {

bool is_tiny_procedural_model(const std::string& model) { return model == "wan22-tiny"; }

}  // namespace autooptim::gates
