#pragma once
// Reading a component's diffusers config.json: optional keys with typed errors that name the
// component and the key, and the positivity checks every config needs. Shared by the transformer,
// the VAE and the text encoder.
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "runtime/error.h"

namespace autooptim::runtime {

class ConfigReader {
 public:
  // what: the component, as the messages name it ("transformer", "vae", "umt5").
  ConfigReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {}

  // Sets out from j[key] when the key is present and not null; a value of the wrong type is an Error.
  template <typename T>
  void read(const char* key, T& out) const {
    if (!j_.contains(key) || j_[key].is_null()) return;
    try {
      out = j_[key].template get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(what_ + " config: key '" + key + "' has the wrong type (" + j_[key].dump() + ")");
    }
  }

  void positive(const char* key, int64_t v) const {
    if (v <= 0) throw Error(what_ + " config: '" + key + "' must be positive, got " + std::to_string(v));
  }

 private:
  const nlohmann::json& j_;
  std::string what_;
};

}  // namespace autooptim::runtime
