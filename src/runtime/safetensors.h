#pragma once
// Reader and writer for the safetensors format (https://github.com/huggingface/safetensors):
// 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then the
// data block. Files are memory-mapped; tensors are views on the mapping that keep it alive.
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace autooptim::runtime {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

const char* to_string(StDType d);
size_t element_size(StDType d);

struct TensorInfo {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets inside the data block
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps and validates the whole header; throws CheckpointError naming the file and the problem.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return infos_.count(name) > 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor over the mapped bytes (copy-on-write, so writing to it never touches the file).
  // F8 tensors are decoded to float32 (libtorch 1.13 has no float8 type).
  at::Tensor tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data block
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
  std::weak_ptr<SafetensorsFile> self_;
};

// Writes tensors (any device; copied to CPU, made contiguous) in name order.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

at::ScalarType to_scalar_type(StDType d);  // F8 types map to float32 (decoded)

}  // namespace autooptim::runtime
