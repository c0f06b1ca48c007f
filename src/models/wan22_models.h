#pragma once
// The entries of the model table, one function per model, each in its own file.
#include "models/model_facts.h"

namespace autooptim::models {

ModelFacts wan22_tiny();
ModelFacts wan22_ti2v_5b();
ModelFacts wan22_t2v_a14b();
ModelFacts wan22_i2v_a14b();
ModelFacts wan22_tiny_moe();

}  // namespace autooptim::models
