#include "gates/clip_frames.h"

#include <opencv2/core.hpp>

namespace autooptim::gates {

bool same_frames(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || a[i].type() != b[i].type()) return false;
    if (cv::norm(a[i], b[i], cv::NORM_INF) != 0) return false;
  }
  return true;
}

bool same_shape(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size()) return false;
  return true;
}

bool finite_video(const at::Tensor& t) { return t.defined() && at::isfinite(t).all().item<bool>(); }

}  // namespace autooptim::gates
