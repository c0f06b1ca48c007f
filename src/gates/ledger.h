#pragma once
// The append-only ledger: one JSON object per line, one write() per row, fsync after each, so a run
// killed at any point loses no finished row. Several processes may append to one ledger at once.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace autooptim::gates {

class Ledger {
 public:
  // Opens (creating it if needed) the ledger file; never truncates a finished row.
  explicit Ledger(const std::string& path);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Appends one row (a JSON object). Adds "ts" (UTC ISO-8601) and "seq" (the row's 0-based index in
  // the file) when absent. A torn last line left by a killed writer is cut off first.
  void append(const nlohmann::json& row);

  // Every finished row. A truncated last line (a writer killed mid-row) is skipped and counted in
  // dropped_partial_lines(); an invalid line anywhere else is an Error naming file:line.
  std::vector<nlohmann::json> read_all() const;
  std::vector<nlohmann::json> read_all(size_t* dropped_partial_lines) const;

  size_t dropped_partial_lines() const { return dropped_partial_lines_; }
  // Bytes of torn rows that append() cut off the end of the file.
  uint64_t repaired_bytes() const { return repaired_bytes_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  // The file only grows while we hold the lock, so complete lines before known_size_ stay counted.
  uint64_t known_size_ = 0;
  uint64_t known_lines_ = 0;
  mutable size_t dropped_partial_lines_ = 0;
  uint64_t repaired_bytes_ = 0;
};

}  // namespace autooptim::gates
