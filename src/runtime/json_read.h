#pragma once
// Parsing JSON that comes from a file we did not write (configs, manifests, headers, prompt lines):
// nesting depth bounded (a value nested 100,000 levels deep must be an error, not a stack overflow in
// a later recursive copy, compare or dump), no NUL byte (nlohmann's lexer takes NUL for the end of the
// input, so "{...}\0junk" would parse), and no key given twice in one object (nlohmann keeps the last
// silently). Every error is prefixed with `label`, usually the file's path, and names the key path.
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

namespace autooptim::runtime {

// Deeper than any config, manifest or safetensors header we read (they nest 3 or 4 levels).
constexpr int kMaxJsonDepth = 64;

namespace detail {

inline std::string json_key_path(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (k.empty()) continue;
    out += out.empty() ? k : "." + k;
  }
  return out.empty() ? "the top level" : "'" + out + "'";
}

}  // namespace detail

// E is the exception type thrown (Error, or CheckpointError for weight files).
template <typename E = Error>
nlohmann::json parse_json_text(std::string_view text, const std::string& label, int max_depth = kMaxJsonDepth) {
  using nlohmann::json;
  const std::string prefix = label.empty() ? "" : label + ": ";
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    throw E(prefix + "not valid JSON: NUL byte at offset " + std::to_string(nul));
  // One entry per open container: its key path segment and, for objects, the keys seen so far.
  std::vector<std::string> keys;
  std::vector<std::set<std::string>> seen;
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth + 1 > max_depth) {
          throw E(prefix + "nesting deeper than " + std::to_string(max_depth) + " levels at " +
                  detail::json_key_path(keys));
        }
        keys.emplace_back();
        seen.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!keys.empty()) keys.pop_back(), seen.pop_back();
        break;
      case json::parse_event_t::key: {
        if (keys.empty()) break;
        std::string k = parsed.get<std::string>();
        keys.back() = k;
        if (!seen.back().insert(k).second) throw E(prefix + "key " + detail::json_key_path(keys) + " is given twice");
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    throw E(prefix + "not valid JSON: " + e.what());
  }
}

}  // namespace autooptim::runtime
