#pragma once
// SHA-256 (FIPS 180-4), our own: pins the held-out prompt file and names manifests by content.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace autooptim::gates {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& data) { update(data.data(), data.size()); }
  // Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex digest of a byte string.
std::string sha256_hex(const std::string& data);
// Lower-case hex digest of a file's bytes; throws autooptim::Error when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace autooptim::gates
