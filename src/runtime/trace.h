#pragma once
// Per-run engagement counters: each technique counts what it did (cache hits, skipped forwards,
// attention density, graph replays) so the gate harness can check that it really engaged.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace autooptim::runtime {

class Trace {
 public:
  void add(const std::string& key, double v = 1.0) { counters_[key] += v; }
  void set(const std::string& key, double v) { counters_[key] = v; }
  double get(const std::string& key) const {
    auto it = counters_.find(key);
    return it == counters_.end() ? 0.0 : it->second;
  }
  bool has(const std::string& key) const { return counters_.count(key) > 0; }
  const std::map<std::string, double>& counters() const { return counters_; }
  nlohmann::json to_json() const { return counters_; }
  void clear() { counters_.clear(); }

 private:
  std::map<std::string, double> counters_;
};

}  // namespace autooptim::runtime
