#pragma once
// The gate's one question about a model by name, kept in one place until the model-facts table answers
// it: whether the model is the tiny test model whose prompts are procedural scenes of one object and
// whose forwards are small, overhead-bound shapes.
#include <string>

namespace autooptim::gates {

bool is_tiny_procedural_model(const std::string& model);

}  // namespace autooptim::gates
