#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_read.h"

namespace autooptim::runtime {
namespace {

// The header of a valid file is small; anything bigger is corruption, not a model.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DTypeRow {
  const char* name;
  StDType dtype;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {"F64", StDType::F64, 8},   {"F32", StDType::F32, 4},         {"F16", StDType::F16, 2},
    {"BF16", StDType::BF16, 2}, {"I64", StDType::I64, 8},         {"I32", StDType::I32, 4},
    {"I16", StDType::I16, 2},   {"I8", StDType::I8, 1},           {"U8", StDType::U8, 1},
    {"BOOL", StDType::BOOL, 1}, {"F8_E4M3", StDType::F8_E4M3, 1}, {"F8_E5M2", StDType::F8_E5M2, 1},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw CheckpointError(path + ": " + what); }

// float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no infinities, 0x7f/0xff are NaN.
float decode_e4m3(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 0x7;
  float v;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man) / 8.0f, -6);
  else
    v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return sign ? -v : v;
}

// float8 e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa, IEEE-like infinities and NaN.
float decode_e5m2(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 2) & 0x1f, man = b & 0x3;
  float v;
  if (exp == 0x1f)
    v = man ? std::nanf("") : INFINITY;
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man) / 4.0f, -14);
  else
    v = std::ldexp(1.0f + static_cast<float>(man) / 4.0f, exp - 15);
  return sign ? -v : v;
}

// One tensor's entry of the header ({"dtype", "shape", "data_offsets"}), checked against the data block's size.
TensorInfo read_tensor_entry(const std::string& path, const std::string& name, const nlohmann::json& v,
                             uint64_t data_size) {
  const std::string where = "tensor '" + name + "': ";
  if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    fail(path, where + "entry needs dtype, shape and data_offsets");
  TensorInfo info;
  info.name = name;
  if (!v["dtype"].is_string()) fail(path, where + "dtype is not a string");
  const std::string dt = v["dtype"].get<std::string>();
  const DTypeRow* row = nullptr;
  for (const auto& r : kDTypes)
    if (dt == r.name) row = &r;
  if (!row) fail(path, where + "unknown dtype '" + dt + "'");
  info.dtype = row->dtype;
  if (!v["shape"].is_array()) fail(path, where + "shape is not an array");
  uint64_t numel = 1;
  for (const auto& d : v["shape"]) {
    if (!d.is_number_unsigned()) fail(path, where + "shape has a non-integer or negative dimension");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > (1ull << 40) || (dim && numel > (1ull << 48) / dim)) fail(path, where + "shape is too large");
    numel *= dim;
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(path, where + "data_offsets must be two non-negative integers");
  info.begin = off[0].get<uint64_t>();
  info.end = off[1].get<uint64_t>();
  if (info.begin > info.end) fail(path, where + "data_offsets begin after they end");
  if (info.end > data_size)
    fail(path, where + "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                   ") run past the end of the data (" + std::to_string(data_size) + " bytes; file truncated?)");
  if (info.end - info.begin != numel * row->size)
    fail(path, where + "data_offsets cover " + std::to_string(info.end - info.begin) + " bytes but " + dt +
                   " shape needs " + std::to_string(numel * row->size));
  return info;
}

// The tensors must cover the data block exactly, in order: no gap, no overlap, nothing after the
// last one. A header length one byte off, or garbage appended to a file, shows up here at once
// instead of as every tensor read one byte off. Zero-size tensors take part (at their offset).
void check_data_covered(const std::string& path, const std::map<std::string, TensorInfo>& infos, uint64_t data_size) {
  std::vector<const TensorInfo*> by_offset;
  for (const auto& kv : infos) by_offset.push_back(&kv.second);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const auto* t : by_offset) {
    if (t->begin < covered) fail(path, "tensors '" + prev->name + "' and '" + t->name + "' overlap in the data block");
    if (t->begin > covered)
      fail(path, "bytes [" + std::to_string(covered) + ", " + std::to_string(t->begin) +
                     ") of the data block belong to no tensor (before '" + t->name + "'; header length wrong?)");
    covered = t->end;
    prev = t;
  }
  if (covered != data_size)
    fail(path, "the data block has " + std::to_string(data_size - covered) + " bytes after the last tensor (" +
                   std::to_string(data_size) + " bytes, tensors cover " + std::to_string(covered) +
                   "; header length wrong, or junk appended?)");
}

}  // namespace

const char* to_string(StDType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r.name;
  return "?";
}

size_t element_size(StDType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r.size;
  return 0;
}

at::ScalarType to_scalar_type(StDType d) {
  switch (d) {
    case StDType::F64:
      return at::kDouble;
    case StDType::F32:
      return at::kFloat;
    case StDType::F16:
      return at::kHalf;
    case StDType::BF16:
      return at::kBFloat16;
    case StDType::I64:
      return at::kLong;
    case StDType::I32:
      return at::kInt;
    case StDType::I16:
      return at::kShort;
    case StDType::I8:
      return at::kChar;
    case StDType::U8:
      return at::kByte;
    case StDType::BOOL:
      return at::kBool;
    case StDType::F8_E4M3:
    case StDType::F8_E5M2:
      return at::kFloat;
  }
  return at::kFloat;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->self_ = f;
  f->path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  f->map_ = m;
  f->map_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(m);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes) fail(path, "header length " + std::to_string(n) + " is implausibly large (corrupt file?)");
  if (n > size - 8)
    fail(path, "truncated: header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  const uint64_t data_size = size - 8 - n;
  f->data_ = bytes + 8 + n;

  // Bounded nesting, no NUL byte (nlohmann would stop there and ignore the junk after it), and no
  // name given twice (nlohmann keeps the last one silently).
  const nlohmann::json header = parse_json_text<CheckpointError>(
      std::string_view(reinterpret_cast<const char*>(bytes + 8), n), path + ": header");
  if (!header.is_object()) fail(path, "header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ is not an object");
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string()) fail(path, "__metadata__." + m2.key() + " is not a string");
        f->metadata_[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    f->infos_.emplace(name, read_tensor_entry(path, name, v, data_size));
  }
  check_data_covered(path, f->infos_, data_size);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& kv : infos_) out.push_back(kv.first);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) fail(path_, "no tensor named '" + name + "'");
  return it->second;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& i = info(name);
  const uint8_t* p = data_ + i.begin;
  const int64_t numel = static_cast<int64_t>((i.end - i.begin) / element_size(i.dtype));
  if (i.dtype == StDType::F8_E4M3 || i.dtype == StDType::F8_E5M2) {
    at::Tensor out = at::empty(i.shape, at::kFloat);
    float* o = out.data_ptr<float>();
    for (int64_t k = 0; k < numel; ++k) o[k] = i.dtype == StDType::F8_E4M3 ? decode_e4m3(p[k]) : decode_e5m2(p[k]);
    return out;
  }
  const auto st = to_scalar_type(i.dtype);
  if (numel == 0) return at::empty(i.shape, st);
  // The data block need not be aligned to the element size; copy such tensors out.
  if (reinterpret_cast<uintptr_t>(p) % element_size(i.dtype) != 0) {
    at::Tensor out = at::empty(i.shape, st);
    std::memcpy(out.data_ptr(), p, i.end - i.begin);
    return out;
  }
  auto keep = self_.lock();
  return at::from_blob(
      const_cast<uint8_t*>(p), i.shape, [keep](void*) {}, at::TensorOptions().dtype(st));
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::pair<std::string, at::Tensor>> sorted = tensors;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t offset = 0;
  std::vector<at::Tensor> data;
  for (auto& [name, t0] : sorted) {
    at::Tensor t = t0.detach().to(at::kCPU).contiguous();
    const char* dt = nullptr;
    switch (t.scalar_type()) {
      case at::kDouble:
        dt = "F64";
        break;
      case at::kFloat:
        dt = "F32";
        break;
      case at::kHalf:
        dt = "F16";
        break;
      case at::kBFloat16:
        dt = "BF16";
        break;
      case at::kLong:
        dt = "I64";
        break;
      case at::kInt:
        dt = "I32";
        break;
      case at::kShort:
        dt = "I16";
        break;
      case at::kChar:
        dt = "I8";
        break;
      case at::kByte:
        dt = "U8";
        break;
      case at::kBool:
        dt = "BOOL";
        break;
      default:
        throw Error(path + ": cannot write tensor '" + name + "' of dtype " +
                    std::string(c10::toString(t.scalar_type())));
    }
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dt}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot create file");
  uint64_t n = h.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& t : data)
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  out.flush();
  if (!out) throw Error(path + ": write failed (disk full?)");
}

}  // namespace autooptim::runtime
