#pragma once
// Reading a component's diffusers config.json: typed keys whose errors name the component and the
// key, and the range checks every config needs. Shared by the transformer, the VAE, the text encoder
// and the scheduler. Types are strict: nlohmann's get<int64_t>() would turn 2.5 into 2 and true into
// 1, so an integer key takes only a JSON integer, a boolean key only true or false, a float key only a
// finite number, and null is an error unless the key is read as nullable. The caller that read the
// file names it (with_config_file).
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"

namespace autooptim::runtime {

// Any one width or count of a model (channels, heads, layers, vocabulary): far above every real model
// and far below the point where a product of two overflows int64.
constexpr int64_t kMaxConfigDim = int64_t{1} << 24;

class ConfigReader {
 public:
  // what: the component, as the messages name it ("transformer", "vae", "umt5").
  ConfigReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {}

  // Sets out from j[key] when the key is present; null or a value of the wrong type is an Error.
  template <typename T>
  void read(const char* key, T& out) const {
    if (!j_.contains(key)) return;
    if (j_[key].is_null()) fail(key, "must not be null");
    convert(key, j_[key], out);
  }

  // As read, but a missing key is an Error too.
  template <typename T>
  void require(const char* key, T& out) const {
    if (!j_.contains(key)) fail(key, "is required but missing");
    read(key, out);
  }

  // As read, but null leaves out unchanged (diffusers' "use the default").
  template <typename T>
  void read_nullable(const char* key, T& out) const {
    if (j_.contains(key) && !j_[key].is_null()) read(key, out);
  }

  void positive(const char* key, int64_t v) const {
    if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
  }

  // A width or count: 1 .. max.
  void dimension(const char* key, int64_t v, int64_t max = kMaxConfigDim) const {
    positive(key, v);
    if (v > max) fail(key, std::to_string(v) + " is implausibly large (at most " + std::to_string(max) + ")");
  }

  // An epsilon or a scale: finite and > 0.
  void positive_finite(const char* key, double v) const {
    if (!(v > 0) || !std::isfinite(v)) fail(key, "must be a positive finite number, got " + std::to_string(v));
  }

  [[noreturn]] void fail(const char* key, const std::string& why) const {
    throw Error(what_ + " config: '" + key + "' " + why);
  }

 private:
  static std::string shown(const nlohmann::json& v) {
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  }

  void convert(const char* key, const nlohmann::json& v, bool& out) const {
    if (!v.is_boolean()) fail(key, "must be true or false, got " + shown(v));
    out = v.get<bool>();
  }
  void convert(const char* key, const nlohmann::json& v, std::string& out) const {
    if (!v.is_string()) fail(key, "must be a string, got " + shown(v));
    out = v.get<std::string>();
  }
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  void convert(const char* key, const nlohmann::json& v, T& out) const {
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + shown(v));
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())
                               : (v.get<int64_t>() < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
                                  v.get<int64_t>() > static_cast<int64_t>(std::numeric_limits<T>::max())))
      fail(key, shown(v) + " is out of the integer range");
    out = v.get<T>();
  }
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  void convert(const char* key, const nlohmann::json& v, T& out) const {
    if (!v.is_number()) fail(key, "must be a number, got " + shown(v));
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be a finite number, got " + shown(v));
    out = static_cast<T>(d);
  }
  template <typename T>
  void convert(const char* key, const nlohmann::json& v, std::vector<T>& out) const {
    if (!v.is_array()) fail(key, "must be a list, got " + shown(v));
    std::vector<T> items;
    for (const auto& e : v) {
      if (e.is_null()) fail(key, "must not hold null");
      T item{};
      convert(key, e, item);
      items.push_back(item);
    }
    out = std::move(items);
  }

  const nlohmann::json& j_;
  std::string what_;
};

// Runs fn (which reads a config out of `file`) so that a config error names the file as well as the
// key. A CheckpointError already names its file.
template <typename F>
auto with_config_file(const std::string& file, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(file + ": " + e.what());
  }
}

}  // namespace autooptim::runtime
