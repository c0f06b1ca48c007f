#include "gates/gate_baseline_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include "base/json_file.h"
#include "base/sha256.h"
#include "runtime/safetensors.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;

namespace autooptim::gates {
namespace {

// 8-bit frames as a [T, 3, H, W] uint8 tensor.
at::Tensor frames_to_u8(const std::vector<cv::Mat>& frames) {
  return (runtime::tensor_from_frames(frames) * 255.0).round().clamp(0, 255).to(at::kByte);
}

}  // namespace

BaselineClipCache::BaselineClipCache(const fs::path& root, nlohmann::json key) : key_(std::move(key)) {
  dir_ = root / sha256_hex(key_.dump()).substr(0, 16);
  fs::create_directories(dir_);
  if (!fs::exists(dir_ / "key.json")) base::write_json_file((dir_ / "key.json").string(), key_);
}

fs::path BaselineClipCache::clip_path(const std::string& prompt_id, int64_t seed, const std::string& suffix) const {
  return dir_ / (prompt_id + "-" + std::to_string(seed) + suffix + ".safetensors");
}

std::optional<std::vector<cv::Mat>> BaselineClipCache::read(const fs::path& f) {
  if (!fs::exists(f)) return std::nullopt;
  const at::Tensor u8 = runtime::SafetensorsFile::open(f.string())->tensor("video").clone();
  return runtime::frames_from_tensor(u8.to(at::kFloat) / 255.0);
}

void BaselineClipCache::write(const fs::path& f, const std::vector<cv::Mat>& frames) {
  const std::string tmp = f.string() + ".tmp" + std::to_string(::getpid());
  runtime::write_safetensors(tmp, {{"video", frames_to_u8(frames)}});
  fs::rename(tmp, f);
}

std::string BaselineClipCache::fingerprint(const fs::path& f) {
  struct stat st {};
  if (::stat(f.c_str(), &st) != 0) return "";
  // The change time too: a process can set a file's modification time back, not its change time.
  auto at = [](const timespec& t) { return std::to_string(t.tv_sec) + "." + std::to_string(t.tv_nsec); };
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         at(st.st_mtim) + ":" + at(st.st_ctim);
}

}  // namespace autooptim::gates
