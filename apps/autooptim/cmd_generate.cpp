// autooptim generate: one clip from a prompt (and optionally an image) with our runtime alone.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#ifdef AUTOOPTIM_HAVE_VIDEOIO
#include <opencv2/imgcodecs.hpp>
#endif

#include "commands.h"
#include "runtime/plugin.h"
#include "base/atomic_file.h"
#include "gates/clip_digest.h"
#include "gates/gate.h"
#include "gates/worker.h"
#include "model_args.h"
#include "models/model_table.h"
#include "base/error.h"
#include "base/log.h"
#include "runtime/video_io.h"
#include "train/scenes.h"

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
  std::string json_out;
  std::vector<std::string> plugins;  // technique plugins to load before the manifest is read
  int64_t threads = 0;
  int64_t repeat = 1;
  double guidance_2 = -1;  // --guidance-2 (negative: not given)
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
  const double scale =
      std::max(static_cast<double>(W) / static_cast<double>(w), static_cast<double>(H) / static_cast<double>(h));
  const int64_t sh = std::max<int64_t>(H, static_cast<int64_t>(std::lround(h * scale)));
  const int64_t sw = std::max<int64_t>(W, static_cast<int64_t>(std::lround(w * scale)));
  const at::Tensor wh = lanczos_weights(h, sh), ww = lanczos_weights(w, sw);
  at::Tensor r = at::matmul(at::matmul(wh, img.to(at::kDouble)), ww.t());  // [3, sh, sw]
  r = (r.clamp(0, 1) * 255.0).round() / 255.0;
  const int64_t y0 = (sh - H) / 2, x0 = (sw - W) / 2;
  return r.slice(1, y0, y0 + H).slice(2, x0, x0 + W).to(at::kFloat).contiguous();
}

// What the command line asks for, as a manifest: the given one (a tier from a report), or the harness's
// pinned baseline at the command line's configuration. Either way the clip is made by the gate's own code
// (gates::Worker::run), so a manifest, prompt and seed give the same clip here as in its gate run.
gates::Manifest manifest_to_generate(GenerateArgs& a, const CLI::App& cmd) {
  const auto& p = a.params;
  if (!a.manifest.empty()) {
    // A manifest carries its configuration and precision: a flag that would change them would make a clip
    // that the gate never judged.
    for (const char* flag :
         {"--steps", "--frames", "--height", "--width", "--guidance", "--guidance-2", "--fps", "--dtype"})
      if (cmd.count(flag) && !(std::string(flag) == "--dtype" && a.model.dtype == "auto"))
        throw Error(std::string(flag) +
                    " cannot be combined with --manifest: the manifest carries its configuration (" + a.manifest +
                    "); drop " + flag + ", or run without --manifest");
    gates::Manifest m = gates::load_manifest(a.manifest);
    if (cmd.count("--model") && a.model.model != m.model)
      throw Error("--model " + a.model.model + ": the manifest " + a.manifest + " is for " + m.model);
    a.model.model = m.model;
    return m;
  }
  nlohmann::json j = gates::to_json(gates::pinned_baseline(a.model.model));
  j["id"] = a.model.model + "/generate";
  j["config"].update({{"height", p.height},
                      {"width", p.width},
                      {"frames", p.frames},
                      {"steps", p.steps},
                      {"guidance", p.guidance},
                      {"seed", p.seed},
                      {"fps", p.fps}});
  // A two-expert model's second guidance scale: as given, else --guidance's where that is given (the
  // reference's rule), else the official one.
  if (j["config"].contains("guidance_2")) {
    if (cmd.count("--guidance-2"))
      j["config"]["guidance_2"] = a.guidance_2;
    else if (cmd.count("--guidance"))
      j["config"]["guidance_2"] = p.guidance;
  } else if (cmd.count("--guidance-2")) {
    throw Error("--guidance-2 is for a model with two experts; " + a.model.model + " has one");
  }
  if (a.model.dtype != "auto") j["flags"]["dtype"] = a.model.dtype;
  return gates::parse_manifest(j, "the command line's configuration");
}

// The trained wan22-tiny knows only its data set's captions: a prompt outside them gives a faint, static
// blob, which a user should hear about before reading anything into the clip.
void warn_outside_vocabulary(const ModelArgs& model, const std::string& prompt) {
  if (!model.tiny_trained()) return;
  const auto outside = train::words_outside_captions(prompt);
  if (outside.empty()) return;
  std::string words;
  for (const auto& w : outside) words += (words.empty() ? "'" : ", '") + w + "'";
  log::warn("wan22-tiny was trained on captions of moving shapes only (docs/training.md); " + words +
            (outside.size() == 1 ? " is" : " are") + " outside them, so the clip will not show " +
            (outside.size() == 1 ? "it" : "them") +
            ". It knows prompts like \"a red circle quickly moves left across a striped background\"");
}

// Step progress: redrawn in place on a terminal; in a log file a line at most every few seconds.
runtime::StepCallback step_progress(log::Progress& progress) {
  return [&progress](int64_t i, int64_t n, double secs) {
    char b[96];
    std::snprintf(b, sizeof b, "step %lld/%lld  %.3f s/step", static_cast<long long>(i + 1), static_cast<long long>(n),
                  secs);
    progress.update("denoising", b);
    if (i + 1 == n) {
      progress.clear();
      progress.event(std::string("denoising done: ") + b);
    }
  };
}

std::optional<at::Tensor> first_frame(const std::string& path, const gates::RunConfig& c) {
  if (path.empty()) return std::nullopt;
  at::Tensor img = read_image(path);
  const int64_t h = img.size(1), w = img.size(2);
  if (h != c.height || w != c.width) {
    img = cover_and_center_crop(img, c.height, c.width);
    const bool same_aspect = h * c.width == w * c.height;
    log::info("--image " + std::to_string(w) + "x" + std::to_string(h) + " resized to " + std::to_string(c.width) +
              "x" + std::to_string(c.height) +
              (same_aspect ? " (Lanczos)"
                           : ": another aspect ratio, so scaled (Lanczos) to cover it and centre-cropped, as the "
                             "reference pipeline does"));
  }
  return img;
}

void print_times(const gates::RunOutput& r, double load_s, bool image, int64_t steps) {
  const auto& t = r.times;
  std::printf("model load     %8.3f s (not part of generation)\n", load_s);
  std::printf("text encoding  %8.3f s\n", t.text_encoding);
  if (image) std::printf("image encoding %8.3f s\n", t.image_encoding);
  std::printf("denoising      %8.3f s (%lld steps, %.0f transformer forwards)\n", t.denoising,
              static_cast<long long>(steps), r.trace.get("transformer.forwards"));
  std::printf("decoding       %8.3f s\n", t.decoding);
  std::printf("total          %8.3f s\n", r.seconds);
}

nlohmann::json run_json(const gates::RunOutput& r, const std::string& digest) {
  const auto& t = r.times;
  return {{"seconds", r.seconds},     {"text_s", t.text_encoding},    {"image_s", t.image_encoding},
          {"denoise_s", t.denoising}, {"decode_s", t.decoding},       {"forwards", r.trace.get("transformer.forwards")},
          {"frames_sha256", digest},  {"counters", r.trace.to_json()}};
}

void run_generate(GenerateArgs& a, const CLI::App& cmd) {
  for (const auto& p : a.plugins) runtime::load_plugin(p);
  const gates::Manifest m = manifest_to_generate(a, cmd);
  const runtime::RuntimeOptions opts = gates::to_runtime_options(m);
  if (!a.manifest.empty()) warn_idle_switches(a.manifest, opts);
  if (a.out.empty() && a.frames_dir.empty() && a.json_out.empty())
    throw Error("give --out clip.mp4, --frames-dir DIR and/or --json OUT");
  if (!a.out.empty()) check_out_path(a.out);  // before the model loads and 50 steps run
  if (!a.params.negative_prompt.empty() && !a.manifest.empty())
    log::warn(
        "--negative-prompt: the gate judged this manifest with the empty negative prompt; this clip is not the one it "
        "measured");
  warn_outside_vocabulary(a.model, a.params.prompt);
  gates::RunExtras extras;
  extras.negative_prompt = a.params.negative_prompt;
  extras.image = first_frame(a.image, m.config);
  if (a.threads > 0) at::set_num_threads(static_cast<int>(a.threads));  // as `worker --threads`, before the model loads
  auto req = a.model.request();
  use_switches(req, opts);
  log::info("loading " + m.model + " ...");
  gates::Worker worker(req);
  char line[256];
  std::snprintf(line, sizeof line, "model loaded in %.2f s (%s; weights: %s; %d CPU threads)", worker.load_seconds(),
                runtime::device_name(worker.device()).c_str(), worker.weights_label().c_str(), at::get_num_threads());
  log::info(line);
  log::Progress progress;
  extras.on_step = step_progress(progress);
  const gates::Prompt prompt{"generate", "", a.params.prompt, {}};
  nlohmann::json runs = nlohmann::json::array();
  gates::RunOutput r;
  std::string digest;
  for (int64_t i = 0; i < a.repeat; ++i) {
    r = worker.run(m, prompt, a.params.seed, extras);
    if (!r.error.empty()) throw Error("the generation failed: " + r.error);
    const std::string d = gates::frames_sha256(runtime::frames_from_tensor(r.video));
    if (!digest.empty() && d != digest)
      log::warn("repeat " + std::to_string(i + 1) +
                " made another clip than the first: this configuration is not deterministic here");
    digest = d;
    runs.push_back(run_json(r, d));
    if (a.repeat > 1)
      log::info("generation " + std::to_string(i + 1) + "/" + std::to_string(a.repeat) + ": " +
                std::to_string(r.seconds).substr(0, 6) + " s");
  }
  const auto frames = runtime::frames_from_tensor(r.video);
  if (!a.out.empty()) runtime::write_video(a.out, frames, m.config.fps);
  if (!a.frames_dir.empty()) runtime::write_png_frames(a.frames_dir, frames);
  print_times(r, worker.load_seconds(), extras.image.has_value(), m.config.steps);
  std::printf("frames sha256  %s\n", digest.c_str());
  if (!a.out.empty() || !a.frames_dir.empty())
    std::printf("wrote %zu frames %lldx%lld at %.0f fps to %s\n", frames.size(), static_cast<long long>(m.config.width),
                static_cast<long long>(m.config.height), m.config.fps, (a.out.empty() ? a.frames_dir : a.out).c_str());
  if (!a.json_out.empty()) {
    nlohmann::json j = {{"manifest", m.id},
                        {"manifest_hash", gates::manifest_hash(m)},
                        {"model", m.model},
                        {"prompt", a.params.prompt},
                        {"seed", a.params.seed},
                        {"config", gates::to_json(m.config)},
                        {"threads", at::get_num_threads()},
                        {"device", runtime::device_name(worker.device())},
                        {"load_s", worker.load_seconds()},
                        {"frames_sha256", digest},
                        {"runs", runs}};
    gates::write_file_atomic(a.json_out, j.dump(2) + "\n");
  }
}

}  // namespace

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate a clip from a prompt (text-to-video) or a prompt and an image");
  a->model.add_to(cmd);
  auto& p = a->params;
  cmd->add_option("--prompt", p.prompt, "What the clip shows")->required();
  cmd->add_option("--negative-prompt", p.negative_prompt, "What to steer away from (default: empty, as diffusers)");
  cmd->add_option("--image", a->image,
                  "First frame (image-to-video); another size is scaled (Lanczos) to cover --width x --height and "
                  "centre-cropped, as the reference does")
      ->check(CLI::ExistingFile);
  cmd->add_option("--seed", p.seed, "Seed of the initial noise")
      ->capture_default_str()
      ->check(int_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--steps", p.steps, "Denoising steps")->capture_default_str()->check(step_count());
  cmd->add_option("--frames", p.frames, "Frames, 4k+1")
      ->default_str("49 for wan22-tiny, 121 for wan22-ti2v-5b")
      ->check(frames_count());
  cmd->add_option("--height", p.height, "Height in pixels, a multiple of 16 (32 for TI2V-5B)")
      ->default_str("96 for wan22-tiny, 704 for wan22-ti2v-5b")
      ->check(pixel_size());
  cmd->add_option("--width", p.width, "Width in pixels, a multiple of 16 (32 for TI2V-5B)")
      ->default_str("160 for wan22-tiny, 1280 for wan22-ti2v-5b")
      ->check(pixel_size());
  cmd->add_option("--guidance", p.guidance, "Classifier-free guidance scale")
      ->capture_default_str()
      ->check(number_in(0, 50));
  cmd->add_option("--guidance-2", a->guidance_2,
                  "The second expert's guidance scale (two-expert models; default: --guidance's, else the "
                  "official one)")
      ->check(number_in(0, 50));
  cmd->add_option("--fps", p.fps, "Frames per second of the written video")
      ->capture_default_str()
      ->check(number_in(0.001, 1000));
  cmd->add_option("--out", a->out, "Output video (.mp4 H.264/MPEG-4, or .y4m)");
  cmd->add_option("--frames-dir", a->frames_dir, "Also write PNG frames here");
  cmd->add_option("--manifest", a->manifest,
                  "Reproduce this manifest (model, configuration, switches), e.g. a report's tiers/2x.json")
      ->check(CLI::ExistingFile);
  cmd->add_option(
      "--plugin", a->plugins,
      "Load a technique plugin (autooptim agent build) whose techniques the manifest turns on (repeatable)");
  cmd->add_option("--json", a->json_out, "Also write the stage times and the frames' SHA-256 here (JSON)");
  cmd->add_option("--threads", a->threads, "CPU threads (0: libtorch's default), as a run's worker --threads")
      ->check(int_in(0, 4096));
  cmd->add_option("--repeat", a->repeat,
                  "Generate the clip this many times in one process (the first includes warm-up costs)")
      ->capture_default_str()
      ->check(int_in(1, 1000));
  cmd->callback([a, cmd] {
    // The size defaults are the model's official setting (the model table's) unless the user says otherwise.
    if (a->manifest.empty()) {
      const models::OfficialRun& o = a->model.facts().official;
      if (cmd->count("--height") == 0) a->params.height = o.height;
      if (cmd->count("--width") == 0) a->params.width = o.width;
      if (cmd->count("--frames") == 0) a->params.frames = o.frames;
    }
    if (a->image.empty() && a->model.facts().pipeline.needs_image && a->manifest.empty())
      throw Error(a->model.model + " is an image-to-video model: give the first frame with --image");
    run_generate(*a, *cmd);
  });
}

}  // namespace autooptim::app
