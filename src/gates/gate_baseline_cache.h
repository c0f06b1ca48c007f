#pragma once
// The baseline's clips, cached per gate environment (build, weights, device, dtype, BLAS threads),
// libtorch threads and baseline manifest: 8-bit frames in safetensors files under a folder named by the
// key's hash. Workers gating in parallel share it.
#include <opencv2/core.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace autooptim::gates {

class BaselineClipCache {
 public:
  // Creates <root>/<hash of key>/ and its key.json.
  BaselineClipCache(const std::filesystem::path& root, nlohmann::json key);
  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& key() const { return key_; }
  // <dir>/<prompt>-<seed><suffix>.safetensors
  std::filesystem::path clip_path(const std::string& prompt_id, int64_t seed, const std::string& suffix = "") const;

  // A cached clip, or nullopt when none is there.
  static std::optional<std::vector<cv::Mat>> read(const std::filesystem::path& file);
  // Temporary name + rename: a parallel worker never reads half a file.
  static void write(const std::filesystem::path& file, const std::vector<cv::Mat>& frames);
  // What changes when the file is rewritten, replaced or touched (its device and inode, size, modification and
  // change times to the nanosecond): how a process knows a clip it verified is still the one it verified.
  // "" when it is absent.
  static std::string fingerprint(const std::filesystem::path& file);

 private:
  nlohmann::json key_;
  std::filesystem::path dir_;
};

}  // namespace autooptim::gates
