#pragma once
// Per-run engagement counters: each technique counts what it did (cache hits, skipped forwards,
// attention density, graph replays) so the gate harness can check that it really engaged.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace autooptim::runtime {

class Trace {
 public:
  void add(const std::string& key, double v = 1.0) { counters_[key] += v; }

  // A value derived from two counters, numerator / denominator (`empty` while the denominator is 0),
  // computed whenever it is read, so it stays right however the counters were added up.
  void define_ratio(const std::string& key, const std::string& numerator, const std::string& denominator,
                    double empty = 1.0) {
    ratios_[key] = {numerator, denominator, empty};
  }

  // Adds another trace's counters to these and takes over its ratio definitions.
  void merge(const Trace& other) {
    for (const auto& [k, v] : other.counters_) counters_[k] += v;
    for (const auto& [k, r] : other.ratios_) ratios_[k] = r;
  }

  double get(const std::string& key) const {
    if (auto r = ratios_.find(key); r != ratios_.end()) {
      const double den = counter(r->second.denominator);
      return den != 0 ? counter(r->second.numerator) / den : r->second.empty;
    }
    return counter(key);
  }
  bool has(const std::string& key) const { return counters_.count(key) > 0 || ratios_.count(key) > 0; }
  const std::map<std::string, double>& counters() const { return counters_; }
  // Counters and ratios, by name.
  nlohmann::json to_json() const {
    nlohmann::json j = counters_;
    for (const auto& [k, r] : ratios_) j[k] = get(k);
    return j;
  }
  void clear() {
    counters_.clear();
    ratios_.clear();
  }

 private:
  struct Ratio {
    std::string numerator, denominator;
    double empty = 1.0;
  };
  double counter(const std::string& key) const {
    auto it = counters_.find(key);
    return it == counters_.end() ? 0.0 : it->second;
  }
  std::map<std::string, double> counters_;
  std::map<std::string, Ratio> ratios_;
};

}  // namespace autooptim::runtime
