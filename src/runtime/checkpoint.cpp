#include "runtime/checkpoint.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/json_read.h"

namespace fs = std::filesystem;

namespace autooptim::runtime {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << "]";
  return o.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string pick_in_folder(const fs::path& dir) {
  std::vector<std::string> index, single;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (ends_with(n, ".safetensors.index.json"))
      index.push_back(e.path().string());
    else if (ends_with(n, ".safetensors"))
      single.push_back(e.path().string());
  }
  std::sort(index.begin(), index.end());
  std::sort(single.begin(), single.end());
  if (index.size() == 1) return index[0];
  if (index.size() > 1) throw CheckpointError(dir.string() + ": more than one *.safetensors.index.json");
  if (single.size() == 1) return single[0];
  if (single.empty()) throw CheckpointError(dir.string() + ": no *.safetensors file in this folder");
  throw CheckpointError(dir.string() +
                        ": several *.safetensors files but no *.safetensors.index.json naming their shards");
}

}  // namespace

bool dtype_loads_into(at::ScalarType checkpoint, at::ScalarType parameter) {
  // Floating parameters take any floating checkpoint dtype (bf16 weights into an fp32 model and back);
  // an integer or bool tensor is never a float parameter's value, and other parameters match exactly.
  if (at::isFloatingType(parameter)) return at::isFloatingType(checkpoint);
  return checkpoint == parameter;
}

nlohmann::json read_json_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw CheckpointError(path + ": is a folder, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open");
  // Config and index files are a few KB; a larger one is not a config.
  constexpr std::streamoff kMaxBytes = 64 << 20;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size > kMaxBytes)
    throw CheckpointError(path + ": " + std::to_string(size) +
                          " bytes is too large for a JSON config (at most 64 MiB)");
  in.seekg(0, std::ios::beg);
  std::string text(static_cast<size_t>(std::max<std::streamoff>(size, 0)), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in) throw CheckpointError(path + ": read error");
  return parse_json_text<CheckpointError>(text, path);
}

TensorSource TensorSource::open(const std::string& path_in) {
  fs::path path(path_in);
  if (!fs::exists(path)) throw CheckpointError(path_in + ": no such file or folder");
  std::string file = fs::is_directory(path) ? pick_in_folder(path) : path.string();
  TensorSource src;
  src.label_ = file;
  if (ends_with(file, ".index.json")) {
    const nlohmann::json idx = read_json_file(file);
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      throw CheckpointError(file + ": index has no weight_map object");
    const fs::path dir = fs::path(file).parent_path();
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw CheckpointError(file + ": weight_map['" + it.key() + "'] is not a file name");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        throw CheckpointError(file + ": shard name '" + shard + "' must be a plain file name");
      auto& f = shards[shard];
      if (!f) {
        if (!fs::exists(dir / shard)) throw CheckpointError(file + ": shard '" + shard + "' is missing");
        f = SafetensorsFile::open((dir / shard).string());
      }
      if (!f->contains(it.key()))
        throw CheckpointError(f->path() + ": index says it holds '" + it.key() + "' but it does not");
      src.where_[it.key()] = f;
    }
  } else {
    auto f = SafetensorsFile::open(file);
    for (const auto& n : f->names()) src.where_[n] = f;
  }
  return src;
}

TensorSource TensorSource::from_tensors(std::map<std::string, at::Tensor> tensors, std::string label) {
  TensorSource src;
  src.label_ = std::move(label);
  src.memory_ = std::move(tensors);
  return src;
}

std::vector<std::string> TensorSource::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  for (const auto& kv : memory_) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

bool TensorSource::contains(const std::string& name) const { return where_.count(name) || memory_.count(name); }

std::vector<int64_t> TensorSource::shape(const std::string& name) const {
  if (auto it = memory_.find(name); it != memory_.end()) return it->second.sizes().vec();
  if (auto it = where_.find(name); it != where_.end()) return it->second->info(name).shape;
  throw CheckpointError(label_ + ": no tensor named '" + name + "'");
}

at::ScalarType TensorSource::dtype(const std::string& name) const {
  if (auto it = memory_.find(name); it != memory_.end()) return it->second.scalar_type();
  if (auto it = where_.find(name); it != where_.end()) return to_scalar_type(it->second->info(name).dtype);
  throw CheckpointError(label_ + ": no tensor named '" + name + "'");
}

std::string TensorSource::dtype_name(const std::string& name) const {
  if (auto it = where_.find(name); it != where_.end()) return to_string(it->second->info(name).dtype);
  return std::string(c10::toString(dtype(name)));
}

at::Tensor TensorSource::tensor(const std::string& name) const {
  if (auto it = memory_.find(name); it != memory_.end()) return it->second;
  if (auto it = where_.find(name); it != where_.end()) return it->second->tensor(name);
  throw CheckpointError(label_ + ": no tensor named '" + name + "'");
}

std::map<std::string, std::vector<int64_t>> parameter_shapes(const torch::nn::Module& module) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : module.named_parameters(true)) out[p.key()] = p.value().sizes().vec();
  return out;
}

void load_strict(torch::nn::Module& module, const TensorSource& source, const LoadOptions& opts) {
  const auto params = module.named_parameters(true);
  std::vector<std::string> missing, misshaped, unexpected, wrong_dtype;
  std::set<std::string> wanted;
  for (const auto& p : params) {
    const std::string key = opts.prefix + p.key();
    wanted.insert(key);
    if (!source.contains(key)) {
      missing.push_back(key);
      continue;
    }
    const auto have = source.shape(key);
    if (have != p.value().sizes().vec())
      misshaped.push_back(key + " (checkpoint " + shape_str(have) + ", model expects " +
                          shape_str(p.value().sizes().vec()) + ")");
    if (!dtype_loads_into(source.dtype(key), p.value().scalar_type()))
      wrong_dtype.push_back(key + " (checkpoint " + source.dtype_name(key) + ", model expects " +
                            std::string(c10::toString(p.value().scalar_type())) + ")");
  }
  for (const auto& n : source.names()) {
    if (n.compare(0, opts.prefix.size(), opts.prefix) != 0 || wanted.count(n)) continue;
    if (std::find(opts.ignore_unexpected.begin(), opts.ignore_unexpected.end(), n) != opts.ignore_unexpected.end())
      continue;
    unexpected.push_back(n);
  }
  if (opts.allow_missing) missing.clear();
  if (!missing.empty() || !misshaped.empty() || !unexpected.empty() || !wrong_dtype.empty()) {
    std::ostringstream o;
    o << source.label() << ": checkpoint does not match the model (" << missing.size() << " missing, "
      << unexpected.size() << " unexpected, " << misshaped.size() << " mis-shaped";
    if (!wrong_dtype.empty()) o << ", " << wrong_dtype.size() << " of the wrong dtype";
    o << ")";
    auto list = [&o](const char* what, const std::vector<std::string>& v) {
      constexpr size_t kShow = 20;
      for (size_t i = 0; i < v.size() && i < kShow; ++i) o << "\n  " << what << ": " << v[i];
      if (v.size() > kShow) o << "\n  ... and " << v.size() - kShow << " more " << what;
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("mis-shaped", misshaped);
    list("wrong dtype", wrong_dtype);
    throw CheckpointError(o.str());
  }
  at::NoGradGuard no_grad;
  for (const auto& p : params) {
    const std::string key = opts.prefix + p.key();
    if (!source.contains(key)) continue;
    at::Tensor dst = p.value();
    dst.copy_(source.tensor(key));
  }
}

}  // namespace autooptim::runtime
