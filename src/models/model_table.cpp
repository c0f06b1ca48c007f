#include "models/model_table.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/strings.h"
#include "models/wan22_models.h"

namespace autooptim::models {

const std::vector<ModelFacts>& model_table() {
  static const std::vector<ModelFacts> table = {wan22_tiny(), wan22_ti2v_5b(), wan22_t2v_a14b(), wan22_i2v_a14b(),
                                                wan22_tiny_moe()};
  return table;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& m : model_table()) names.push_back(m.name);
  return names;
}

std::vector<std::string> model_names_sorted() {
  std::vector<std::string> names = model_names();
  std::sort(names.begin(), names.end());
  return names;
}

const ModelFacts* find_model(const std::string& name) {
  for (const auto& m : model_table())
    if (m.name == name) return &m;
  return nullptr;
}

const ModelFacts& model_facts(const std::string& name) {
  if (const ModelFacts* m = find_model(name)) return *m;
  throw Error("unknown model '" + name + "' (known: " + base::join(model_names()) + ")");
}

const ModelFacts& embedded_model() {
  for (const auto& m : model_table())
    if (m.embedded) return m;
  throw Error("the model table has no embedded model");
}

std::vector<std::string> trainable_models() {
  std::vector<std::string> names;
  for (const auto& m : model_table())
    if (m.trainable) names.push_back(m.name);
  return names;
}

const ModelFacts* model_with_prompt_folder(const std::string& folder_name) {
  for (const auto& m : model_table())
    if (m.own_prompts && std::filesystem::path(m.own_prompts->dir).filename() == folder_name) return &m;
  return nullptr;
}

}  // namespace autooptim::models
