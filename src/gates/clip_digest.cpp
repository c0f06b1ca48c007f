#include "gates/clip_digest.h"

#include <cstdint>

#include "base/sha256.h"

namespace autooptim::gates {

std::string frames_sha256(const std::vector<cv::Mat>& frames) {
  Sha256 h;
  auto add = [&h](int64_t v) { h.update(&v, sizeof v); };
  add(static_cast<int64_t>(frames.size()));
  for (const cv::Mat& f : frames) {
    add(f.rows);
    add(f.cols);
    add(f.type());
    const size_t row_bytes = static_cast<size_t>(f.cols) * f.elemSize();
    for (int r = 0; r < f.rows; ++r) h.update(f.ptr(r), row_bytes);
  }
  return h.hex_digest();
}

}  // namespace autooptim::gates
