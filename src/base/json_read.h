#pragma once
// Parsing JSON that comes from a file we did not write (configs, manifests, headers, prompt lines):
// nesting depth bounded (a value nested 100,000 levels deep must be an error, not a stack overflow in
// a later recursive copy, compare or dump), no NUL byte (nlohmann's lexer takes NUL for the end of the
// input, so "{...}\0junk" would parse), and no key given twice in one object (nlohmann keeps the last
// silently). Every error is prefixed with `label`, usually the file's path, and names the key path.
#include <nlohmann/json.hpp>

#include <unordered_set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"

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

// The checks as a SAX pass (linear in the text): depth, and each object's keys seen once. nlohmann's parse with
// a callback is quadratic in an object's member count (each member object's end walks its parent's members
// looking for discarded values): a safetensors header of 100,000 tensors took 85 s that way.
template <typename E>
class JsonChecker : public nlohmann::json_sax<nlohmann::json> {
 public:
  JsonChecker(std::string prefix, int max_depth) : prefix_(std::move(prefix)), max_depth_(max_depth) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    keys_.back() = k;
    if (!seen_.back().insert(k).second) throw E(prefix_ + "key " + json_key_path(keys_) + " is given twice");
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw E(prefix_ + "not valid JSON: " + e.what());
  }

 private:
  bool open() {
    if (static_cast<int>(keys_.size()) + 1 > max_depth_)
      throw E(prefix_ + "nesting deeper than " + std::to_string(max_depth_) + " levels at " + json_key_path(keys_));
    keys_.emplace_back();
    seen_.emplace_back();
    return true;
  }
  bool close() {
    if (!keys_.empty()) keys_.pop_back(), seen_.pop_back();
    return true;
  }
  std::string prefix_;
  int max_depth_;
  std::vector<std::string> keys_;                      // per open container: its current key (arrays: "")
  std::vector<std::unordered_set<std::string>> seen_;  // per open container: the keys seen so far
};

}  // namespace detail

// E is the exception type thrown (Error, or CheckpointError for weight files). Two linear passes: the
// checks (detail::JsonChecker), then nlohmann's own parse of text that passed them.
template <typename E = Error>
nlohmann::json parse_json_text(std::string_view text, const std::string& label, int max_depth = kMaxJsonDepth) {
  using nlohmann::json;
  const std::string prefix = label.empty() ? "" : label + ": ";
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    throw E(prefix + "not valid JSON: NUL byte at offset " + std::to_string(nul));
  // nlohmann skips a leading byte-order mark; our line and hash readers do not: one rule, refused everywhere.
  if (text.substr(0, 3) == "\xEF\xBB\xBF")
    throw E(prefix + "starts with a UTF-8 byte-order mark; save it as UTF-8 without one");
  detail::JsonChecker<E> checker(prefix, max_depth);
  json::sax_parse(text.begin(), text.end(), &checker);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw E(prefix + "not valid JSON: " + e.what());
  }
}

}  // namespace autooptim::runtime
