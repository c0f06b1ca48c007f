#pragma once
// Video output and input of the runtime and the gates. Frames are cv::Mat in RGB order, CV_8UC3 (or
// CV_32FC3 in [0,1], rounded to 8-bit on write). Formats:
// - .y4m (YUV4MPEG2): our own reader and writer, so it works without OpenCV videoio (the GPU machine).
//   Written as 8-bit full-range BT.601 YCbCr ("XCOLORRANGE=FULL"), 4:4:4 by default or 4:2:0 (C420jpeg).
//   8-bit YCbCr cannot hold every RGB triple: RGB -> file -> RGB is exact for grey pixels and within
//   2 levels otherwise (4:4:4); the YCbCr planes themselves round-trip bit-exactly.
//   The reader takes 8-bit C444, C422, C420jpeg/C420/C420paldv/C420mpeg2 (chroma upsampled by
//   repetition) and Cmono; full range unless the header says XCOLORRANGE=LIMITED.
// - .mp4 (and .avi/.mkv/.mov for reading): OpenCV VideoWriter/VideoCapture, only where the build has
//   videoio (AUTOOPTIM_HAVE_VIDEOIO); elsewhere a clear error.
// - PNG frames: frame_0000.png ... through imgcodecs, likewise.
// Every error is an autooptim::Error naming the file.
#include <opencv2/core.hpp>

#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace autooptim::runtime {

struct VideoInfo {
  int frames = 0, width = 0, height = 0;
  double fps = 0;
};

enum class Y4mChroma { k444, k420jpeg };

// By extension: .mp4 (H.264 'avc1', falling back to MPEG-4 Part 2 'mp4v') or .y4m (4:4:4).
void write_video(const std::string& path, const std::vector<cv::Mat>& rgb_frames, double fps);
void write_y4m(const std::string& path, const std::vector<cv::Mat>& rgb_frames, double fps,
               Y4mChroma chroma = Y4mChroma::k444);
// Creates dir; writes dir/frame_0000.png, frame_0001.png, ...
void write_png_frames(const std::string& dir, const std::vector<cv::Mat>& rgb_frames);
// The frames write_png_frames wrote there, in order (CV_8UC3 RGB, bit for bit); Error naming a file that is not
// an 8-bit three-channel PNG, or a folder without frame_0000.png.
std::vector<cv::Mat> read_png_frames(const std::string& dir);

std::vector<cv::Mat> read_video(const std::string& path);  // CV_8UC3 RGB frames
// Frame count, size and rate. For .y4m from the headers without decoding; for videoio formats the
// frames are counted by grabbing them all (the container's count can be an estimate).
VideoInfo probe_video(const std::string& path);

// [T, 3, H, W] float in [0,1] (any device) -> T frames CV_8UC3, as torchvision does: (x * 255).round()
// with round-half-even, clamped; NaN becomes 0 (so the black-frame detector sees it), +-Inf 255 / 0.
std::vector<cv::Mat> frames_from_tensor(const at::Tensor& video);
// The same without rounding: CV_32FC3 in [0,1], NaN and Inf kept for the NaN detector.
std::vector<cv::Mat> float_frames_from_tensor(const at::Tensor& video);
// Frames (CV_8UC3 or CV_32FC3 in [0,1]) -> [T, 3, H, W] float32 CPU tensor in [0,1] (8-bit / 255).
at::Tensor tensor_from_frames(const std::vector<cv::Mat>& frames);

}  // namespace autooptim::runtime
