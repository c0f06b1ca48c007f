#pragma once
// The table of the models autooptim knows, one entry per model (models/wan22_*.cpp). Every fact that
// depends on which model runs is read from here; nothing else compares a model's name.
#include <string>
#include <vector>

#include "models/model_facts.h"

namespace autooptim::models {

// The model a command runs when none is named.
inline constexpr const char* kDefaultModel = "wan22-tiny";

// Every model, in the order the command line lists them (the embedded one first).
const std::vector<ModelFacts>& model_table();
std::vector<std::string> model_names();
// The names in sorted order (as a manifest's errors list them).
std::vector<std::string> model_names_sorted();

// nullptr for an unknown name.
const ModelFacts* find_model(const std::string& name);
// Throws Error "unknown model '<name>' (known: ...)" for an unknown name.
const ModelFacts& model_facts(const std::string& name);

// The embedded model (the one with ModelFacts::embedded).
const ModelFacts& embedded_model();
// The models `autooptim train` can train.
std::vector<std::string> trainable_models();
// The model whose own prompt set lives in a folder named `folder_name` (the last component of
// PromptPin::dir); nullptr when none does.
const ModelFacts* model_with_prompt_folder(const std::string& folder_name);

}  // namespace autooptim::models
