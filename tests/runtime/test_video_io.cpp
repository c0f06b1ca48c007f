// Video I/O: the y4m writer/reader (our own code), the OpenCV mp4 and PNG paths where the build has them,
// the tensor <-> frame conversions, and errors that name the file.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <opencv2/imgproc.hpp>
#ifdef AUTOOPTIM_HAVE_VIDEOIO
#include <opencv2/imgcodecs.hpp>
#endif

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "error_of.h"
#include "gates/metrics.h"
#include "base/error.h"
#include "runtime/video_io.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::runtime;
using autooptim::test::TempDir;
using autooptim::test::write_bytes;

namespace {

std::vector<cv::Mat> random_clip(int n, int w, int h, uint64_t seed) {
  cv::RNG rng(seed);
  std::vector<cv::Mat> c;
  for (int t = 0; t < n; ++t) {
    cv::Mat f(h, w, CV_8UC3);
    rng.fill(f, cv::RNG::UNIFORM, 0, 256);
    c.push_back(f);
  }
  return c;
}

// A smooth moving picture (codecs keep it well).
std::vector<cv::Mat> smooth_clip(int n, int w, int h) {
  std::vector<cv::Mat> c;
  for (int t = 0; t < n; ++t) {
    cv::Mat f(h, w, CV_8UC3);
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < w; ++j) {
        const double s = std::sin((j + 2.0 * t) / 9.0) * std::cos((i - t) / 7.0);
        f.at<cv::Vec3b>(i, j) =
            cv::Vec3b(cv::saturate_cast<uint8_t>(128 + 80 * s), cv::saturate_cast<uint8_t>(100 + 40 * s),
                      cv::saturate_cast<uint8_t>(60 + 20 * j / double(w)));
      }
    c.push_back(f);
  }
  return c;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using autooptim::test::error_of;

int max_abs_diff(const cv::Mat& a, const cv::Mat& b) {
  cv::Mat d;
  cv::absdiff(a, b, d);
  double mx = 0;
  cv::minMaxLoc(d.reshape(1), nullptr, &mx);
  return static_cast<int>(mx);
}

}  // namespace

TEST(Y4m, GreyRoundTripIsBitExact) {
  TempDir tmp;
  std::vector<cv::Mat> grey;
  for (const auto& f : random_clip(3, 33, 17, 1)) {  // odd sizes on purpose
    cv::Mat g, g3;
    cv::cvtColor(f, g, cv::COLOR_RGB2GRAY);
    cv::cvtColor(g, g3, cv::COLOR_GRAY2RGB);
    grey.push_back(g3);
  }
  for (auto chroma : {Y4mChroma::k444, Y4mChroma::k420jpeg}) {
    const auto path = tmp.file(chroma == Y4mChroma::k444 ? "g444.y4m" : "g420.y4m");
    write_y4m(path, grey, 24, chroma);
    const auto back = read_video(path);
    ASSERT_EQ(back.size(), grey.size());
    for (size_t t = 0; t < grey.size(); ++t) EXPECT_EQ(max_abs_diff(back[t], grey[t]), 0) << t;
  }
}

TEST(Y4m, ColourRoundTripWithinTwoLevelsAndFileLayout) {
  TempDir tmp;
  const auto path = tmp.file("c.y4m");
  const auto clip = random_clip(4, 32, 16, 2);
  write_video(path, clip, 24);
  const std::string bytes = read_all(path);
  const std::string header = "YUV4MPEG2 W32 H16 F24:1 Ip A1:1 C444 XCOLORRANGE=FULL\n";
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  EXPECT_EQ(bytes.size(), header.size() + 4 * (6 + 3 * 32 * 16));
  EXPECT_EQ(bytes.substr(header.size(), 6), "FRAME\n");
  const auto back = read_video(path);
  ASSERT_EQ(back.size(), 4u);
  double err = 0;
  for (size_t t = 0; t < clip.size(); ++t) {
    EXPECT_LE(max_abs_diff(back[t], clip[t]), 2);
    cv::Mat d;
    cv::absdiff(back[t], clip[t], d);
    err += cv::mean(d)[0] / clip.size();
  }
  EXPECT_LT(err, 0.6);
  // 4:2:0 on a smooth picture: close, and a quarter of the chroma bytes.
  const auto smooth = smooth_clip(2, 32, 16);
  const auto p420 = tmp.file("c420.y4m");
  write_y4m(p420, smooth, 24, Y4mChroma::k420jpeg);
  const std::string h420 = "YUV4MPEG2 W32 H16 F24:1 Ip A1:1 C420jpeg XCOLORRANGE=FULL\n";
  EXPECT_EQ(read_all(p420).size(), h420.size() + 2 * (6 + 32 * 16 + 2 * 16 * 8));
  const auto back420 = read_video(p420);
  EXPECT_GT(gates::psnr(back420[0], smooth[0]), 30.0);
}

TEST(Y4m, PlanesRoundTripBitExactAndKnownDecode) {
  TempDir tmp;
  // A file with grey chroma written by hand: read -> write reproduces it byte for byte.
  const int w = 8, h = 4;
  std::string file = "YUV4MPEG2 W8 H4 F24:1 Ip A1:1 C444 XCOLORRANGE=FULL\n";
  for (int t = 0; t < 2; ++t) {
    file += "FRAME\n";
    for (int k = 0; k < w * h; ++k) file.push_back(static_cast<char>((k * 7 + t * 31) % 256));
    file += std::string(2 * w * h, static_cast<char>(128));
  }
  const auto src = tmp.file("src.y4m"), dst = tmp.file("dst.y4m");
  write_bytes(src, file);
  write_video(dst, read_video(src), 24);
  EXPECT_EQ(read_all(dst), file);

  // Y 100, Cb 128, Cr 200 -> R = 100 + 1.402 * 72, G = 100 - 0.714136 * 72, B = 100.
  std::string one = "YUV4MPEG2 W2 H2 F25:1 C444\nFRAME\n";
  one += std::string(4, char(100)) + std::string(4, char(128)) + std::string(4, char(200));
  write_bytes(tmp.file("one.y4m"), one);
  const auto px = read_video(tmp.file("one.y4m"));
  ASSERT_EQ(px.size(), 1u);
  EXPECT_EQ(px[0].at<cv::Vec3b>(1, 1), cv::Vec3b(201, 49, 100));
  // Limited range: Y 16 is black, Y 235 white.
  std::string lim = "YUV4MPEG2 W2 H1 F25:1 C444 XCOLORRANGE=LIMITED\nFRAME\n";
  lim += std::string{char(16), char(235)} + std::string(4, char(128));
  write_bytes(tmp.file("lim.y4m"), lim);
  const auto l = read_video(tmp.file("lim.y4m"));
  EXPECT_EQ(l[0].at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 0));
  EXPECT_EQ(l[0].at<cv::Vec3b>(0, 1), cv::Vec3b(255, 255, 255));
}

TEST(Y4m, ProbeAndFloatFrames) {
  TempDir tmp;
  std::vector<cv::Mat> f;
  for (const auto& m : smooth_clip(5, 24, 10)) {
    cv::Mat x;
    m.convertTo(x, CV_32FC3, 1 / 255.0);
    f.push_back(x);
  }
  write_video(tmp.file("a.y4m"), f, 24000.0 / 1001.0);
  const VideoInfo info = probe_video(tmp.file("a.y4m"));
  EXPECT_EQ(info.frames, 5);
  EXPECT_EQ(info.width, 24);
  EXPECT_EQ(info.height, 10);
  EXPECT_NEAR(info.fps, 24000.0 / 1001.0, 1e-9);
  EXPECT_NE(read_all(tmp.file("a.y4m")).find("F24000:1001"), std::string::npos);
  write_video(tmp.file("b.y4m"), f, 24);
  EXPECT_EQ(probe_video(tmp.file("b.y4m")).fps, 24.0);
}

TEST(Y4m, DamagedFilesAreErrorsNamingTheFile) {
  TempDir tmp;
  const auto good = tmp.file("good.y4m");
  write_video(good, random_clip(2, 8, 8, 3), 24);
  const std::string bytes = read_all(good);

  const auto trunc = tmp.file("trunc.y4m");
  write_bytes(trunc, bytes.substr(0, bytes.size() - 10));
  EXPECT_NE(error_of([&] { read_video(trunc); }).find("trunc.y4m: frame 1 is truncated"), std::string::npos);
  EXPECT_NE(error_of([&] { probe_video(trunc); }).find("trunc.y4m"), std::string::npos);

  const auto bad = tmp.file("bad.y4m");
  write_bytes(bad, "RIFF nonsense\n");
  EXPECT_NE(error_of([&] { read_video(bad); }).find("bad.y4m: not a YUV4MPEG2 file"), std::string::npos);
  write_bytes(bad, "YUV4MPEG2 W8 H8 C420p10\nFRAME\n");
  EXPECT_NE(error_of([&] { read_video(bad); }).find("unsupported YUV4MPEG2 colour space"), std::string::npos);
  write_bytes(bad, "YUV4MPEG2 W8 C444\n");
  EXPECT_NE(error_of([&] { read_video(bad); }).find("W and H"), std::string::npos);
  write_bytes(bad, bytes.substr(0, bytes.find("FRAME")) + "FRAMX\n");
  EXPECT_NE(error_of([&] { read_video(bad); }).find("FRAME marker"), std::string::npos);

  EXPECT_NE(error_of([&] { read_video(tmp.file("missing.y4m")); }).find("missing.y4m: cannot open"), std::string::npos);
}

TEST(VideoIo, BadPathsAndExtensions) {
  TempDir tmp;
  const auto clip = random_clip(2, 16, 16, 4);
  EXPECT_NE(error_of([&] { write_video(tmp.file("x.avi"), clip, 24); }).find("x.avi: unsupported video extension"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_video(tmp.file("noext"), clip, 24); }).find("noext"), std::string::npos);
  EXPECT_NE(error_of([&] { read_video(tmp.file("x.txt")); }).find("x.txt"), std::string::npos);
  EXPECT_NE(error_of([&] { write_video(tmp.file("e.y4m"), {}, 24); }).find("e.y4m: no frames"), std::string::npos);
  EXPECT_NE(error_of([&] { write_video(tmp.file("z.y4m"), clip, 0); }).find("frame rate"), std::string::npos);
  std::vector<cv::Mat> mixed = {clip[0], random_clip(1, 8, 8, 5)[0]};
  EXPECT_NE(error_of([&] { write_video(tmp.file("m.y4m"), mixed, 24); }).find("m.y4m: frame 1 is 8x8"),
            std::string::npos);
  // A folder where the file's parent should be: cannot be written.
  write_bytes(tmp.file("plain"), "x");
  EXPECT_NE(error_of([&] { write_video(tmp.file("plain") + "/v.y4m", clip, 24); }).find("v.y4m"), std::string::npos);
  EXPECT_NE(error_of([&] { write_png_frames(tmp.file("plain"), clip); }).find("plain"), std::string::npos);
  EXPECT_NE(error_of([&] { probe_video(tmp.file("missing.mp4")); }).find("missing.mp4"), std::string::npos);
}

#ifdef AUTOOPTIM_HAVE_VIDEOIO
TEST(VideoIo, Mp4WriteProbeRead) {
  TempDir tmp;
  const auto path = tmp.file("out/clip.mp4");  // the folder is created
  const auto clip = smooth_clip(10, 96, 64);
  write_video(path, clip, 24);
  const VideoInfo info = probe_video(path);
  EXPECT_EQ(info.frames, 10);
  EXPECT_EQ(info.width, 96);
  EXPECT_EQ(info.height, 64);
  EXPECT_NEAR(info.fps, 24.0, 0.01);
  const auto back = read_video(path);
  ASSERT_EQ(back.size(), 10u);
  EXPECT_GT(gates::psnr(back[5], clip[5]), 25.0);  // lossy, but the same picture in RGB order
}

TEST(VideoIo, PngFrames) {
  TempDir tmp;
  const auto clip = random_clip(3, 20, 12, 6);
  write_png_frames(tmp.file("frames"), clip);
  for (int t = 0; t < 3; ++t) {
    char name[32];
    std::snprintf(name, sizeof(name), "frames/frame_%04d.png", t);
    cv::Mat bgr = cv::imread(tmp.file(name), cv::IMREAD_COLOR), rgb;
    ASSERT_FALSE(bgr.empty()) << name;
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    EXPECT_EQ(max_abs_diff(rgb, clip[t]), 0) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.file("frames/frame_0003.png")));
}
#else
TEST(VideoIo, Mp4AndPngNeedVideoio) {
  TempDir tmp;
  const auto clip = random_clip(2, 16, 16, 4);
  EXPECT_NE(error_of([&] { write_video(tmp.file("a.mp4"), clip, 24); }).find("videoio"), std::string::npos);
  EXPECT_NE(error_of([&] { write_png_frames(tmp.file("f"), clip); }).find("imgcodecs"), std::string::npos);
}
#endif

TEST(TensorFrames, RoundHalfEvenLikeTorchvision) {
  // Values whose float product with 255 is exactly k + 0.5: half-even rounding sends them to the even k.
  std::vector<float> halves;
  for (int k = 0; k < 255 && halves.size() < 5; ++k) {
    const float x = (k + 0.5f) / 255.0f;
    if (x * 255.0f == k + 0.5f) halves.push_back(x);
  }
  ASSERT_FALSE(halves.empty());
  const int n = static_cast<int>(halves.size());
  at::Tensor v = at::rand({2, 3, 4, 5});
  for (int i = 0; i < n; ++i) v[0][0][0][i] = halves[i];
  v[1][2][3][4] = std::numeric_limits<float>::quiet_NaN();
  v[1][1][3][4] = 1.7f;
  v[1][0][3][4] = -0.2f;
  const auto frames = frames_from_tensor(v);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].type(), CV_8UC3);
  EXPECT_EQ(frames[0].size(), cv::Size(5, 4));
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>(halves[i] * 255.0f - 0.5f);
    EXPECT_EQ(frames[0].at<cv::Vec3b>(0, i)[0], k % 2 == 0 ? k : k + 1) << k;
  }
  EXPECT_EQ(frames[1].at<cv::Vec3b>(3, 4), cv::Vec3b(0, 255, 0));  // -0.2 -> 0, 1.7 -> 255, NaN -> 0
  // Every element as std::nearbyint(x * 255) (half-even in the default rounding mode); channel order RGB.
  const auto acc = v.accessor<float, 4>();
  for (int t = 0; t < 2; ++t)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j) {
          if (t == 1 && i == 3 && j == 4) continue;
          EXPECT_EQ(frames[t].at<cv::Vec3b>(i, j)[c], static_cast<int>(std::nearbyint(acc[t][c][i][j] * 255.0f)));
        }

  const auto ff = float_frames_from_tensor(v);
  EXPECT_TRUE(std::isnan(ff[1].at<cv::Vec3f>(3, 4)[2]));
  EXPECT_EQ(ff[0].at<cv::Vec3f>(2, 3)[1], acc[0][1][2][3]);

  // 8-bit frames -> tensor -> 8-bit frames is exact.
  const auto clip = random_clip(3, 7, 6, 8);
  const at::Tensor back = tensor_from_frames(clip);
  EXPECT_EQ(back.sizes(), (std::vector<int64_t>{3, 3, 6, 7}));
  EXPECT_FLOAT_EQ(back[1][2][5][6].item<float>(), clip[1].at<cv::Vec3b>(5, 6)[2] / 255.0f);
  const auto again = frames_from_tensor(back);
  for (size_t t = 0; t < clip.size(); ++t) EXPECT_EQ(max_abs_diff(again[t], clip[t]), 0);

  EXPECT_THROW(frames_from_tensor(at::rand({2, 4, 4, 4})), Error);
  EXPECT_THROW(frames_from_tensor(at::zeros({2, 3, 4, 4}, at::kByte)), Error);
}
