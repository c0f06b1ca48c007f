#pragma once
// Helpers shared by the tests: temporary folders and raw file writing.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "base/remove_tree.h"

namespace autooptim::test {

inline std::string data_dir() { return AUTOOPTIM_TEST_DATA; }
inline std::string golden_dir() { return data_dir() + "/golden"; }

// A fresh folder under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("autooptim-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    autooptim::runtime::remove_tree(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The autooptim binary run from the source tree as a user would: its exit code and its stdout and stderr
// together. (The targets define AUTOOPTIM_BIN and AUTOOPTIM_SOURCE_DIR.)
struct CliResult {
  int code;
  std::string output;
};
inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string("cd ") + AUTOOPTIM_SOURCE_DIR + " && " + AUTOOPTIM_BIN + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a raw header string and a data block (no validation).
inline std::string raw_safetensors(const std::string& header, const std::string& data, uint64_t len_override = 0) {
  const uint64_t n = len_override ? len_override : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace autooptim::test
