#pragma once
// The identity of a clip: the SHA-256 of its 8-bit frames (what a video file and every metric are made
// from), independent of the container's headers. The gate records it for each clip it judged; `generate`
// prints it; the deploy check and the tests compare the two (docs/deploy.md).
#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace autooptim::gates {

// Lower-case hex SHA-256 over the frames' count, each frame's rows, columns and type, then its pixels row
// by row (so padding between rows never counts). Two clips have the same digest iff every pixel is equal.
std::string frames_sha256(const std::vector<cv::Mat>& frames);

}  // namespace autooptim::gates
