#pragma once
// A set of named tensors from one safetensors file, a sharded checkpoint (*.safetensors.index.json),
// or a diffusers component folder; and strict loading of a module's parameters from it.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "runtime/safetensors.h"

namespace torch::nn {
class Module;
}

namespace autooptim::runtime {

class TensorSource {
 public:
  // path: a .safetensors file, a .safetensors.index.json, or a folder holding exactly one of either
  // (diffusers names first: diffusion_pytorch_model*, model*).
  static TensorSource open(const std::string& path);
  // Tensors held in memory (synthetic weights, tests).
  static TensorSource from_tensors(std::map<std::string, at::Tensor> tensors, std::string label);

  const std::string& label() const { return label_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;       // CPU, checkpoint dtype
  at::ScalarType dtype(const std::string& name) const;    // as tensor() returns it (float8 decodes to float)
  std::string dtype_name(const std::string& name) const;  // as the file names it ("I32", "F8_E4M3")

 private:
  std::string label_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> where_;  // tensor name -> file
  std::map<std::string, at::Tensor> memory_;
};

// Whether a checkpoint tensor of dtype `checkpoint` may be copied into a parameter of dtype `parameter`.
bool dtype_loads_into(at::ScalarType checkpoint, at::ScalarType parameter);

// Reads a JSON file (bounded nesting, no NUL byte, no key twice) with errors that name it.
nlohmann::json read_json_file(const std::string& path);

struct LoadOptions {
  std::string prefix;                          // checkpoint key prefix of the module ("" for none)
  std::vector<std::string> ignore_unexpected;  // checkpoint keys allowed to have no parameter
  // Optional per-parameter dtype; default keeps each parameter's own dtype.
  bool allow_missing = false;
};

// Copies every parameter of `module` from `source`. One CheckpointError lists every missing,
// unexpected, mis-shaped and wrongly typed tensor; nothing is copied unless all are right.
void load_strict(torch::nn::Module& module, const TensorSource& source, const LoadOptions& opts = {});

// Every parameter's dotted name and shape, as load_strict sees them.
std::map<std::string, std::vector<int64_t>> parameter_shapes(const torch::nn::Module& module);

}  // namespace autooptim::runtime
