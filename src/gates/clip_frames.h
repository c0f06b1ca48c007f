#pragma once
// Facts about decoded clips that the gate run and its checks share: bit-identity, comparable shape,
// finite output.
#include <ATen/ATen.h>
#include <opencv2/core.hpp>

#include <vector>

namespace autooptim::gates {

// Same frame count, sizes, types and every pixel.
bool same_frames(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b);
// Same frame count and each frame the same size: clips a metric can compare.
bool same_shape(const std::vector<cv::Mat>& a, const std::vector<cv::Mat>& b);
// A written output: defined and free of NaN/Inf.
bool finite_video(const at::Tensor& t);

}  // namespace autooptim::gates
