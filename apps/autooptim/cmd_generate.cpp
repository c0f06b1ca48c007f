// autooptim generate: one clip from a prompt (and optionally an image) with our runtime alone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#ifdef AUTOOPTIM_HAVE_VIDEOIO
#include <opencv2/imgcodecs.hpp>
#endif

#include "commands.h"
#include "gates/generate_params.h"
#include "model_args.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;

namespace autooptim::app {
namespace {

struct GenerateArgs {
  ModelArgs model;
  runtime::GenerateParams params;
  std::string image;
  std::string out;
  std::string frames_dir;
  std::string manifest;
};

// An RGB image file -> [3, H, W] float in [0, 1].
at::Tensor read_image(const std::string& path) {
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  cv::Mat bgr = cv::imread(path, cv::IMREAD_COLOR);
  if (bgr.empty()) throw Error(path + ": cannot read the image (missing, or not an image OpenCV can decode)");
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  at::Tensor t = at::from_blob(rgb.data, {rgb.rows, rgb.cols, 3}, at::kByte).clone();
  return t.permute({2, 0, 1}).to(at::kFloat) / 255.0;
#else
  throw Error(path + ": this build has no image decoding (OpenCV imgcodecs missing)");
#endif
}

// The writer knows .mp4 (OpenCV videoio) and .y4m; anything else fails now, not after the steps.
void check_out_path(const std::string& out) {
  std::string ext = fs::path(out).extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
#ifdef AUTOOPTIM_HAVE_VIDEOIO
  if (ext != ".mp4" && ext != ".y4m")
    throw Error("--out " + out + ": unsupported video extension \"" + ext + "\" (use .mp4 or .y4m)");
#else
  if (ext != ".y4m") throw Error("--out " + out + ": this build writes only .y4m videos (no OpenCV videoio)");
#endif
  const fs::path dir = fs::absolute(out).parent_path();
  if (!fs::is_directory(dir)) throw Error("--out " + out + ": the folder " + dir.string() + " does not exist");
}

// Lanczos-3 resampling along one axis as PIL does it: the kernel is widened by the scale when
// shrinking (an antialiasing filter), each output pixel's weights are normalised. [out, in].
at::Tensor lanczos_weights(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double fscale = std::max(scale, 1.0), support = 3.0 * fscale;
  auto sinc = [](double x) { return x == 0 ? 1.0 : std::sin(M_PI * x) / (M_PI * x); };
  at::Tensor w = at::zeros({out, in}, at::kDouble);
  auto acc = w.accessor<double, 2>();
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(center + support + 0.5));
    double total = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const double x = (static_cast<double>(j) - center + 0.5) / fscale;
      const double v = std::fabs(x) < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
      acc[i][j] = v;
      total += v;
    }
    if (total != 0)
      for (int64_t j = lo; j < hi; ++j) acc[i][j] /= total;
  }
  return w;
}

// The reference's first-frame preparation (Wan2.2 textimage2video): scale by max(W/w, H/h) with Lanczos
// so the image covers the target, round to 8 bits as a PIL image is, then crop the centre. [3, h, w]
// in [0, 1] -> [3, H, W].
at::Tensor cover_and_center_crop(const at::Tensor& img, int64_t H, int64_t W) {
  const int64_t h = img.size(1), w = img.size(2);
  const double scale = std::max(static_cast<double>(W) / static_cast<double>(w), static_cast<double>(H) / static_cast<double>(h));
  const int64_t sh = std::max<int64_t>(H, static_cast<int64_t>(std::lround(h * scale)));
  const int64_t sw = std::max<int64_t>(W, static_cast<int64_t>(std::lround(w * scale)));
  const at::Tensor wh = lanczos_weights(h, sh), ww = lanczos_weights(w, sw);
  at::Tensor r = at::matmul(at::matmul(wh, img.to(at::kDouble)), ww.t());  // [3, sh, sw]
  r = (r.clamp(0, 1) * 255.0).round() / 255.0;
  const int64_t y0 = (sh - H) / 2, x0 = (sw - W) / 2;
  return r.slice(1, y0, y0 + H).slice(2, x0, x0 + W).to(at::kFloat).contiguous();
}

void run_generate(GenerateArgs& a) {
  auto& p = a.params;
  runtime::RuntimeOptions opts;
  if (!a.manifest.empty()) {
    // Reproduce a manifest (a tier from a report): its model, configuration and switches.
    const auto m = gates::load_manifest(a.manifest);
    a.model.model = m.model;
    const std::string prompt = p.prompt, negative = p.negative_prompt;
    p = gates::generate_params(m.config, prompt);
    p.negative_prompt = negative;
    opts = gates::to_runtime_options(m);
    warn_idle_switches(a.manifest, opts);
  }
  if (a.out.empty() && a.frames_dir.empty()) throw Error("give --out clip.mp4 and/or --frames-dir DIR");
  if (!a.out.empty()) check_out_path(a.out);  // before the model loads and 50 steps run
  runtime::validate_params(p);
  if (!a.image.empty()) {
    at::Tensor img = read_image(a.image);
    const int64_t h = img.size(1), w = img.size(2);
    if (h != p.height || w != p.width) {
      img = cover_and_center_crop(img, p.height, p.width);
      const bool same_aspect = h * p.width == w * p.height;
      log::info("--image " + std::to_string(w) + "x" + std::to_string(h) + " resized to " + std::to_string(p.width) + "x" +
                std::to_string(p.height) + (same_aspect ? " (Lanczos)" : ": another aspect ratio, so scaled (Lanczos) to cover it and centre-cropped, as the reference pipeline does"));
    }
    p.image = img;
  }
  auto req = a.model.request();
  log::info("loading " + a.model.model + " ...");
  if (!a.manifest.empty()) use_switches(req, opts);
  auto loaded = runtime::load_model(req);
  char line[256];
  std::snprintf(line, sizeof line, "model loaded in %.2f s (%s; weights: %s)", loaded.load_seconds,
                runtime::device_name(loaded.pipeline->precision().device).c_str(), loaded.weights_label.c_str());
  log::info(line);
  // Step progress: redrawn in place on a terminal; in a log file a line at most every few seconds.
  log::Progress progress;
  const auto result = loaded.pipeline->generate(p, [&progress](int64_t i, int64_t n, double secs) {
    char b[96];
    std::snprintf(b, sizeof b, "step %lld/%lld  %.3f s/step", static_cast<long long>(i + 1), static_cast<long long>(n), secs);
    progress.update("denoising", b);
    if (i + 1 == n) {
      progress.clear();
      progress.event(std::string("denoising done: ") + b);
    }
  });
  const auto frames = runtime::frames_from_tensor(result.video);
  if (!a.out.empty()) runtime::write_video(a.out, frames, p.fps);
  if (!a.frames_dir.empty()) runtime::write_png_frames(a.frames_dir, frames);
  const auto& t = result.times;
  std::printf("model load     %8.3f s (not part of generation)\n", loaded.load_seconds);
  std::printf("text encoding  %8.3f s\n", t.text_encoding);
  if (p.image) std::printf("image encoding %8.3f s\n", t.image_encoding);
  std::printf("denoising      %8.3f s (%lld steps, %.0f transformer forwards)\n", t.denoising,
              static_cast<long long>(p.steps), result.trace.get("transformer.forwards"));
  std::printf("decoding       %8.3f s\n", t.decoding);
  std::printf("total          %8.3f s\n", t.total());
  std::printf("wrote %lld frames %lldx%lld at %.0f fps to %s\n", static_cast<long long>(frames.size()),
              static_cast<long long>(p.width), static_cast<long long>(p.height), p.fps,
              (a.out.empty() ? a.frames_dir : a.out).c_str());
}

}  // namespace

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate a clip from a prompt (text-to-video) or a prompt and an image");
  a->model.add_to(cmd);
  auto& p = a->params;
  cmd->add_option("--prompt", p.prompt, "What the clip shows")->required();
  cmd->add_option("--negative-prompt", p.negative_prompt, "What to steer away from (default: empty, as diffusers)");
  cmd->add_option("--image", a->image, "First frame (image-to-video); another size is scaled (Lanczos) to cover --width x --height and centre-cropped, as the reference does")->check(CLI::ExistingFile);
  cmd->add_option("--seed", p.seed, "Seed of the initial noise")->capture_default_str()->check(int_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--steps", p.steps, "Denoising steps")->capture_default_str()->check(step_count());
  cmd->add_option("--frames", p.frames, "Frames, 4k+1")->default_str("49 for wan22-tiny, 121 for wan22-ti2v-5b")->check(frames_count());
  cmd->add_option("--height", p.height, "Height in pixels, a multiple of 32")->default_str("96 for wan22-tiny, 704 for wan22-ti2v-5b")->check(pixel_size());
  cmd->add_option("--width", p.width, "Width in pixels, a multiple of 32")->default_str("160 for wan22-tiny, 1280 for wan22-ti2v-5b")->check(pixel_size());
  cmd->add_option("--guidance", p.guidance, "Classifier-free guidance scale")->capture_default_str()->check(number_in(0, 50));
  cmd->add_option("--fps", p.fps, "Frames per second of the written video")->capture_default_str()->check(number_in(0, 1000, true));
  cmd->add_option("--out", a->out, "Output video (.mp4 H.264/MPEG-4, or .y4m)");
  cmd->add_option("--frames-dir", a->frames_dir, "Also write PNG frames here");
  cmd->add_option("--manifest", a->manifest, "Reproduce this manifest (model, configuration, switches), e.g. a report's tiers/2x.json")
      ->check(CLI::ExistingFile);
  cmd->callback([a, cmd] {
    // The tiny model's defaults are its own small official setting unless the user says otherwise.
    if (a->model.model == "wan22-tiny" && a->manifest.empty()) {
      if (cmd->count("--height") == 0) a->params.height = 96;
      if (cmd->count("--width") == 0) a->params.width = 160;
      if (cmd->count("--frames") == 0) a->params.frames = 49;
    }
    run_generate(*a);
  });
}

}  // namespace autooptim::app
