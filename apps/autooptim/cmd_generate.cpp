// autooptim generate: one clip from a prompt (and optionally an image) with our runtime alone.
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
  }
  if (a.out.empty() && a.frames_dir.empty()) throw Error("give --out clip.mp4 and/or --frames-dir DIR");
  runtime::validate_params(p);
  if (!a.image.empty()) p.image = read_image(a.image);
  std::fprintf(stderr, "loading %s ...\n", a.model.model.c_str());
  auto req = a.model.request();
  if (!a.manifest.empty()) {
    req.precision.compute = runtime::compute_dtype(opts.dtype, req.precision.device);
    req.options = opts;
  }
  auto loaded = runtime::load_model(req);
  std::fprintf(stderr, "model loaded in %.2f s (%s; weights: %s)\n", loaded.load_seconds,
               runtime::device_name(loaded.pipeline->precision().device).c_str(), loaded.weights_label.c_str());
  const auto result = loaded.pipeline->generate(p, [](int64_t i, int64_t n, double secs) {
    std::fprintf(stderr, "\rstep %3lld/%lld  %.3f s/step", static_cast<long long>(i + 1), static_cast<long long>(n), secs);
    if (i + 1 == n) std::fprintf(stderr, "\n");
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
  cmd->add_option("--image", a->image, "First frame (image-to-video); resized to --height x --width")->check(CLI::ExistingFile);
  cmd->add_option("--seed", p.seed, "Seed of the initial noise")->capture_default_str()->check(int_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--steps", p.steps, "Denoising steps")->capture_default_str()->check(step_count());
  cmd->add_option("--frames", p.frames, "Frames, 4k+1")->capture_default_str()->check(frames_count());
  cmd->add_option("--height", p.height, "Height in pixels, a multiple of 32")->capture_default_str()->check(pixel_size());
  cmd->add_option("--width", p.width, "Width in pixels, a multiple of 32")->capture_default_str()->check(pixel_size());
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
