#include "runtime/video_io.h"

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>
#ifdef AUTOOPTIM_HAVE_VIDEOIO
#include <opencv2/imgcodecs.hpp>
#include <opencv2/videoio.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace autooptim::runtime {
namespace {

namespace fs = std::filesystem;

std::string extension_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

// The frame as CV_8UC3 RGB: 8-bit as is, float in [0,1] rounded (half to even) and clamped, grey expanded.
cv::Mat to_u8_rgb(const cv::Mat& frame, const std::string& path, size_t index) {
  const std::string where = path + ": frame " + std::to_string(index);
  if (frame.empty()) throw Error(where + " is empty");
  if (frame.channels() != 1 && frame.channels() != 3)
    throw Error(where + " has " + std::to_string(frame.channels()) + " channels; expected 3 (RGB)");
  cv::Mat u8;
  if (frame.depth() == CV_8U)
    u8 = frame;
  else if (frame.depth() == CV_32F)
    frame.convertTo(u8, CV_8U, 255.0);
  else
    throw Error(where + ": unsupported depth; expected CV_8U or CV_32F in [0,1]");
  if (u8.channels() == 1) cv::cvtColor(u8, u8, cv::COLOR_GRAY2RGB);
  return u8;
}

void check_frames(const std::string& path, const std::vector<cv::Mat>& frames, double fps) {
  if (frames.empty()) throw Error(path + ": no frames to write");
  // A y4m header holds the rate as a ratio of integers over 1000 at most: below 0.001 fps it would read 0.
  if (!(fps >= 0.001) || !std::isfinite(fps) || fps > 1000)
    throw Error(path + ": frame rate must be between 0.001 and 1000 frames per second, got " + std::to_string(fps));
  for (size_t t = 0; t < frames.size(); ++t)
    if (frames[t].size() != frames[0].size())
      throw Error(path + ": frame " + std::to_string(t) + " is " + std::to_string(frames[t].cols) + "x" +
                  std::to_string(frames[t].rows) + ", frame 0 is " + std::to_string(frames[0].cols) + "x" +
                  std::to_string(frames[0].rows));
}

void ensure_parent(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(path + ": cannot create folder " + parent.string() + ": " + ec.message());
}

// fps as a y4m ratio: integers exactly, NTSC-style rates over 1001, anything else over 1000.
std::pair<int64_t, int64_t> fps_ratio(double fps) {
  if (std::abs(fps - std::round(fps)) < 1e-9) return {static_cast<int64_t>(std::llround(fps)), 1};
  const double ntsc = fps * 1001.0 / 1000.0;
  if (std::abs(ntsc - std::round(ntsc)) < 1e-6) return {std::llround(ntsc) * 1000, 1001};
  return {std::llround(fps * 1000.0), 1000};
}

// Full-range BT.601 (JFIF) YCbCr.
inline uint8_t clamp_u8(double v) { return cv::saturate_cast<uint8_t>(v); }

struct Y4mHeader {
  int width = 0, height = 0;
  int64_t fps_num = 0, fps_den = 1;
  std::string chroma = "420jpeg";  // the format's default when C is absent
  bool limited = false;
  std::streamoff data_begin = 0;  // first byte after the header line
  int chroma_w() const { return chroma == "444" || chroma == "mono" ? width : (width + 1) / 2; }
  int chroma_h() const { return chroma.rfind("420", 0) == 0 ? (height + 1) / 2 : chroma == "mono" ? 0 : height; }
  size_t frame_bytes() const {
    const size_t luma = static_cast<size_t>(width) * height;
    return chroma == "mono" ? luma : luma + 2 * static_cast<size_t>(chroma_w()) * chroma_h();
  }
};

std::string read_line(std::istream& in, size_t limit) {
  std::string line;
  char c;
  while (line.size() < limit && in.get(c)) {
    if (c == '\n') return line;
    line.push_back(c);
  }
  return line + (in ? "\x01" : "");  // marks an over-long line; an unterminated one has no marker
}

Y4mHeader parse_y4m_header(std::istream& in, const std::string& path) {
  const std::string line = read_line(in, 4096);
  if (!in || line.rfind("YUV4MPEG2", 0) != 0)
    throw Error(path + ": not a YUV4MPEG2 file (header must start with \"YUV4MPEG2 \")");
  Y4mHeader h;
  std::istringstream ss(line.substr(9));
  std::string tok;
  while (ss >> tok) {
    const char key = tok[0];
    const std::string val = tok.substr(1);
    try {
      if (key == 'W') {
        h.width = std::stoi(val);
      } else if (key == 'H') {
        h.height = std::stoi(val);
      } else if (key == 'F') {
        const auto colon = val.find(':');
        if (colon == std::string::npos) throw Error("bad F");
        h.fps_num = std::stoll(val.substr(0, colon));
        h.fps_den = std::stoll(val.substr(colon + 1));
      } else if (key == 'C') {
        h.chroma = val;
      } else if (key == 'X' && val == "COLORRANGE=LIMITED") {
        h.limited = true;
      }
    } catch (const std::exception&) {
      throw Error(path + ": bad YUV4MPEG2 header field \"" + tok + "\"");
    }
  }
  if (h.width <= 0 || h.height <= 0) throw Error(path + ": YUV4MPEG2 header lacks a positive W and H");
  static const char* kSupported[] = {"444", "422", "420jpeg", "420", "420paldv", "420mpeg2", "mono"};
  if (std::find_if(std::begin(kSupported), std::end(kSupported), [&](const char* s) { return h.chroma == s; }) ==
      std::end(kSupported))
    throw Error(path + ": unsupported YUV4MPEG2 colour space C" + h.chroma + " (8-bit 444, 422, 420*, mono only)");
  h.data_begin = in.tellg();
  return h;
}

// Reads the "FRAME[ params]\n" line; false at a clean end of file.
bool next_frame_header(std::istream& in, const std::string& path, int index) {
  if (in.peek() == std::char_traits<char>::eof()) return false;
  const std::string line = read_line(in, 1024);
  if (line.rfind("FRAME", 0) != 0 || line.back() == '\x01')
    throw Error(path + ": frame " + std::to_string(index) + " does not start with a FRAME marker");
  return true;
}

cv::Mat decode_y4m_frame(const Y4mHeader& h, const std::vector<uint8_t>& buf) {
  const int w = h.width, ht = h.height, cw = h.chroma_w(), ch = h.chroma_h();
  const uint8_t* y = buf.data();
  const uint8_t* u = y + static_cast<size_t>(w) * ht;
  const uint8_t* v = u + static_cast<size_t>(cw) * ch;
  const int sx = cw == w ? 0 : 1, sy = ch == ht ? 0 : 1;
  cv::Mat rgb(ht, w, CV_8UC3);
  for (int i = 0; i < ht; ++i) {
    auto* out = rgb.ptr<cv::Vec3b>(i);
    for (int j = 0; j < w; ++j) {
      double yy = y[static_cast<size_t>(i) * w + j], cb = 0, cr = 0;
      if (h.chroma != "mono") {
        const size_t k = static_cast<size_t>(i >> sy) * cw + (j >> sx);
        cb = u[k] - 128.0;
        cr = v[k] - 128.0;
      }
      if (h.limited) {
        yy = (yy - 16.0) * 255.0 / 219.0;
        cb *= 255.0 / 224.0;
        cr *= 255.0 / 224.0;
      }
      out[j] =
          cv::Vec3b(clamp_u8(yy + 1.402 * cr), clamp_u8(yy - 0.344136 * cb - 0.714136 * cr), clamp_u8(yy + 1.772 * cb));
    }
  }
  return rgb;
}

std::vector<cv::Mat> read_y4m(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open video");
  const Y4mHeader h = parse_y4m_header(in, path);
  std::vector<cv::Mat> frames;
  std::vector<uint8_t> buf(h.frame_bytes());
  for (int t = 0; next_frame_header(in, path, t); ++t) {
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() != static_cast<std::streamsize>(buf.size()))
      throw Error(path + ": frame " + std::to_string(t) + " is truncated");
    frames.push_back(decode_y4m_frame(h, buf));
  }
  return frames;
}

VideoInfo probe_y4m(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open video");
  const Y4mHeader h = parse_y4m_header(in, path);
  VideoInfo info{0, h.width, h.height, h.fps_den > 0 ? static_cast<double>(h.fps_num) / h.fps_den : 0.0};
  const auto size = static_cast<std::streamoff>(fs::file_size(path));
  for (int t = 0; next_frame_header(in, path, t); ++t) {
    const std::streamoff end = static_cast<std::streamoff>(in.tellg()) + static_cast<std::streamoff>(h.frame_bytes());
    if (end > size) throw Error(path + ": frame " + std::to_string(t) + " is truncated");
    in.seekg(end);
    ++info.frames;
  }
  return info;
}

#ifdef AUTOOPTIM_HAVE_VIDEOIO
bool is_videoio_ext(const std::string& ext) { return ext == ".mp4" || ext == ".avi" || ext == ".mkv" || ext == ".mov"; }

cv::VideoCapture open_capture(const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": no such video file");
  cv::VideoCapture cap(path);
  if (!cap.isOpened()) throw Error(path + ": OpenCV cannot open the video");
  return cap;
}
#endif

#ifndef AUTOOPTIM_HAVE_VIDEOIO
[[noreturn]] void no_videoio(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what + " needs OpenCV videoio/imgcodecs, which this build lacks (use .y4m)");
}
#endif

void check_video_tensor(const at::Tensor& video) {
  if (!video.defined()) throw Error("video tensor is undefined");
  if (video.dim() != 4 || video.size(1) != 3 || !video.is_floating_point()) {
    std::string shape;
    for (auto d : video.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    throw Error("video tensor must be float [T, 3, H, W] in [0,1], got [" + shape + "] " +
                std::string(c10::toString(video.scalar_type())));
  }
}

}  // namespace

void write_y4m(const std::string& path, const std::vector<cv::Mat>& rgb_frames, double fps, Y4mChroma chroma) {
  check_frames(path, rgb_frames, fps);
  ensure_parent(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot open for writing");
  const int w = rgb_frames[0].cols, h = rgb_frames[0].rows;
  const auto [num, den] = fps_ratio(fps);
  const bool c420 = chroma == Y4mChroma::k420jpeg;
  out << "YUV4MPEG2 W" << w << " H" << h << " F" << num << ":" << den << " Ip A1:1 C" << (c420 ? "420jpeg" : "444")
      << " XCOLORRANGE=FULL\n";
  const int cw = c420 ? (w + 1) / 2 : w, ch = c420 ? (h + 1) / 2 : h;
  std::vector<uint8_t> yp(static_cast<size_t>(w) * h), up(static_cast<size_t>(cw) * ch), vp(up.size());
  std::vector<double> cb(static_cast<size_t>(w) * h), cr(cb.size());
  for (size_t t = 0; t < rgb_frames.size(); ++t) {
    const cv::Mat rgb = to_u8_rgb(rgb_frames[t], path, t);
    for (int i = 0; i < h; ++i) {
      const auto* p = rgb.ptr<cv::Vec3b>(i);
      for (int j = 0; j < w; ++j) {
        const double r = p[j][0], g = p[j][1], b = p[j][2];
        const size_t k = static_cast<size_t>(i) * w + j;
        yp[k] = clamp_u8(0.299 * r + 0.587 * g + 0.114 * b);
        cb[k] = 128.0 - 0.168736 * r - 0.331264 * g + 0.5 * b;
        cr[k] = 128.0 + 0.5 * r - 0.418688 * g - 0.081312 * b;
      }
    }
    // 4:2:0 (JPEG siting, centred): each chroma sample is the mean of its 2x2 block (fewer at odd edges).
    for (int i = 0; i < ch; ++i)
      for (int j = 0; j < cw; ++j) {
        double su = 0, sv = 0;
        int n = 0;
        const int f = c420 ? 2 : 1;
        for (int di = 0; di < f && i * f + di < h; ++di)
          for (int dj = 0; dj < f && j * f + dj < w; ++dj) {
            const size_t k = static_cast<size_t>(i * f + di) * w + (j * f + dj);
            su += cb[k];
            sv += cr[k];
            ++n;
          }
        up[static_cast<size_t>(i) * cw + j] = clamp_u8(su / n);
        vp[static_cast<size_t>(i) * cw + j] = clamp_u8(sv / n);
      }
    out << "FRAME\n";
    out.write(reinterpret_cast<const char*>(yp.data()), static_cast<std::streamsize>(yp.size()));
    out.write(reinterpret_cast<const char*>(up.data()), static_cast<std::streamsize>(up.size()));
    out.write(reinterpret_cast<const char*>(vp.data()), static_cast<std::streamsize>(vp.size()));
  }
  out.close();
  if (!out) throw Error(path + ": write failed");
}

void write_video(const std::string& path, const std::vector<cv::Mat>& rgb_frames, double fps) {
  const std::string ext = extension_of(path);
  if (ext == ".y4m") return write_y4m(path, rgb_frames, fps);
  if (ext != ".mp4") throw Error(path + ": unsupported video extension \"" + ext + "\" (use .mp4 or .y4m)");
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  check_frames(path, rgb_frames, fps);
  ensure_parent(path);
  const cv::Size size = rgb_frames[0].size();
  cv::VideoWriter writer;
  for (const char* cc : {"avc1", "mp4v"}) {
    if (writer.open(path, cv::VideoWriter::fourcc(cc[0], cc[1], cc[2], cc[3]), fps, size, true)) break;
  }
  if (!writer.isOpened()) throw Error(path + ": OpenCV cannot open an H.264 ('avc1') or MPEG-4 ('mp4v') writer");
  for (size_t t = 0; t < rgb_frames.size(); ++t) {
    cv::Mat bgr;
    cv::cvtColor(to_u8_rgb(rgb_frames[t], path, t), bgr, cv::COLOR_RGB2BGR);
    writer.write(bgr);
  }
  writer.release();
  std::error_code ec;
  if (!fs::exists(path, ec) || fs::file_size(path, ec) == 0) throw Error(path + ": the video writer produced no file");
#else
  no_videoio(path, "writing .mp4");
#endif
}

void write_png_frames(const std::string& dir, const std::vector<cv::Mat>& rgb_frames) {
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  if (rgb_frames.empty()) throw Error(dir + ": no frames to write");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw Error(dir + ": cannot create the frame folder" + (ec ? ": " + ec.message() : ""));
  for (size_t t = 0; t < rgb_frames.size(); ++t) {
    char name[32];
    std::snprintf(name, sizeof(name), "frame_%04zu.png", t);
    const std::string file = (fs::path(dir) / name).string();
    cv::Mat bgr;
    cv::cvtColor(to_u8_rgb(rgb_frames[t], file, t), bgr, cv::COLOR_RGB2BGR);
    bool ok = false;
    try {
      ok = cv::imwrite(file, bgr);
    } catch (const cv::Exception& e) {
      throw Error(file + ": cannot write PNG: " + e.what());
    }
    if (!ok) throw Error(file + ": cannot write PNG");
  }
#else
  (void)rgb_frames;
  no_videoio(dir, "writing PNG frames");
#endif
}

std::vector<cv::Mat> read_png_frames(const std::string& dir) {
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  std::vector<cv::Mat> frames;
  for (size_t t = 0;; ++t) {
    char name[32];
    std::snprintf(name, sizeof(name), "frame_%04zu.png", t);
    const fs::path file = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) break;
    const cv::Mat bgr = cv::imread(file.string(), cv::IMREAD_UNCHANGED);
    if (bgr.empty() || bgr.type() != CV_8UC3) throw Error(file.string() + ": not an 8-bit three-channel PNG");
    cv::Mat rgb;
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    frames.push_back(rgb);
  }
  if (frames.empty()) throw Error(dir + ": no frame_0000.png");
  return frames;
#else
  no_videoio(dir, "reading PNG frames");
#endif
}

std::vector<cv::Mat> read_video(const std::string& path) {
  const std::string ext = extension_of(path);
  if (ext == ".y4m") return read_y4m(path);
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  if (!is_videoio_ext(ext)) throw Error(path + ": unsupported video extension \"" + ext + "\"");
  cv::VideoCapture cap = open_capture(path);
  std::vector<cv::Mat> frames;
  cv::Mat bgr;
  while (cap.read(bgr)) {
    cv::Mat rgb;
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    frames.push_back(rgb);
  }
  if (frames.empty()) throw Error(path + ": no frames could be decoded");
  return frames;
#else
  no_videoio(path, "reading \"" + ext + "\" video");
#endif
}

VideoInfo probe_video(const std::string& path) {
  const std::string ext = extension_of(path);
  if (ext == ".y4m") return probe_y4m(path);
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  if (!is_videoio_ext(ext)) throw Error(path + ": unsupported video extension \"" + ext + "\"");
  cv::VideoCapture cap = open_capture(path);
  VideoInfo info;
  info.fps = cap.get(cv::CAP_PROP_FPS);
  info.width = static_cast<int>(cap.get(cv::CAP_PROP_FRAME_WIDTH));
  info.height = static_cast<int>(cap.get(cv::CAP_PROP_FRAME_HEIGHT));
  while (cap.grab()) ++info.frames;
  return info;
#else
  no_videoio(path, "probing \"" + ext + "\" video");
#endif
}

std::vector<cv::Mat> frames_from_tensor(const at::Tensor& video) {
  check_video_tensor(video);
  at::Tensor v = video.detach().to(at::kCPU, at::kFloat);
  v = at::nan_to_num(v, 0.0, 1.0, 0.0).mul(255.0).round().clamp(0.0, 255.0).to(at::kByte);
  v = v.permute({0, 2, 3, 1}).contiguous();  // [T, H, W, 3]
  const int t_n = static_cast<int>(v.size(0)), h = static_cast<int>(v.size(1)), w = static_cast<int>(v.size(2));
  std::vector<cv::Mat> frames;
  frames.reserve(static_cast<size_t>(t_n));
  for (int t = 0; t < t_n; ++t) frames.push_back(cv::Mat(h, w, CV_8UC3, v[t].data_ptr<uint8_t>()).clone());
  return frames;
}

std::vector<cv::Mat> float_frames_from_tensor(const at::Tensor& video) {
  check_video_tensor(video);
  at::Tensor v = video.detach().to(at::kCPU, at::kFloat).permute({0, 2, 3, 1}).contiguous();  // [T, H, W, 3]
  const int t_n = static_cast<int>(v.size(0)), h = static_cast<int>(v.size(1)), w = static_cast<int>(v.size(2));
  std::vector<cv::Mat> frames;
  frames.reserve(static_cast<size_t>(t_n));
  for (int t = 0; t < t_n; ++t) frames.push_back(cv::Mat(h, w, CV_32FC3, v[t].data_ptr<float>()).clone());
  return frames;
}

at::Tensor tensor_from_frames(const std::vector<cv::Mat>& frames) {
  if (frames.empty()) throw Error("tensor_from_frames: no frames");
  const int h = frames[0].rows, w = frames[0].cols;
  at::Tensor out = at::empty({static_cast<int64_t>(frames.size()), h, w, 3}, at::kFloat);
  for (size_t t = 0; t < frames.size(); ++t) {
    const cv::Mat& f = frames[t];
    if (f.rows != h || f.cols != w || f.channels() != 3)
      throw Error("tensor_from_frames: frame " + std::to_string(t) + " differs in shape from frame 0 or is not RGB");
    cv::Mat dst(h, w, CV_32FC3, out[static_cast<int64_t>(t)].data_ptr<float>());
    if (f.depth() == CV_8U)
      f.convertTo(dst, CV_32F, 1.0 / 255.0);
    else if (f.depth() == CV_32F)
      f.copyTo(dst);
    else
      throw Error("tensor_from_frames: frame " + std::to_string(t) + " is neither CV_8U nor CV_32F");
  }
  return out.permute({0, 3, 1, 2}).contiguous();  // [T, 3, H, W]
}

}  // namespace autooptim::runtime
