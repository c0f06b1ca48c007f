#pragma once
// The procedural video data set wan22-tiny is trained on: seeded scenes of a textured shape (circle,
// square, triangle) over a dark, low-saturation background (plain, gradient, stripes, checks), that
// moves, spins, grows or shrinks, changes colour, or is filmed by a panning camera; each scene has a
// caption made of words the tiny tokenizer knows and a machine-readable truth (the moving object's
// colour and direction) that the evaluation checks generated clips against.
//
// Scenes are parameters (SceneSpec, drawn on the CPU from (seed, index), so the same seed gives the
// same scenes on every device); render() turns a batch of them into pixels with batched torch ops on
// any device.
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace autooptim::train {

enum class SceneKind { kMove, kSpin, kGrow, kShrink, kPan, kRecolor };
const char* kind_name(SceneKind k);

// The palette of object colours (saturated, hue-separated) and the motion directions.
const std::vector<std::string>& color_names();
const std::vector<std::string>& shape_names();
const std::vector<std::string>& direction_names();  // left, right, up, down
const std::vector<std::string>& background_names();
// The words of `prompt` (lower-cased, in order, once each) that no caption of the data set uses: what the
// trained wan22-tiny never saw, and cannot show ("ball", "bouncing").
std::vector<std::string> words_outside_captions(const std::string& prompt);
// Nominal RGB in [0, 1] of a palette colour.
std::array<float, 3> color_rgb(int color);

struct SceneSpec {
  SceneKind kind = SceneKind::kMove;
  int color = 0;      // index into color_names(): the object's colour (the start colour for kRecolor)
  int color2 = 0;     // kRecolor: the end colour
  int shape = 0;      // index into shape_names()
  int direction = 0;  // kMove: the object's motion; kPan: the camera's (the object moves the other way)
  int background = 0;
  bool quick = false;  // kMove: "quickly" (longer travel) or "slowly"
  // Continuous parameters (pixels are for the nominal 160x96 frame and scale with the frame size).
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;            // object centre at the first and last frame, in [0, 1] units
  float radius = 0.1f, radius1 = 0.1f;             // object size (fraction of the frame height), start and end
  float angle0 = 0, angle1 = 0;                    // rotation in radians, start and end
  float rgb[3] = {0, 0, 0}, rgb2[3] = {0, 0, 0};   // jittered colours
  float bg_a[3] = {0, 0, 0}, bg_b[3] = {0, 0, 0};  // background colours
  float bg_angle = 0, bg_period = 0.2f;            // stripes/gradient orientation and period (of the height)
  float pan_x = 0, pan_y = 0;                      // background offset at the last frame (fraction of the frame)
  float tex_period = 0.3f, tex_amp = 0.1f;         // stripes inside the object (fraction of its radius)
  std::string caption;
  nlohmann::json truth() const;  // kind, caption, color, direction, shape, background, ...
};

// How a data set's scenes are drawn beyond the seed. The defaults are the data set every shipped model
// was trained on; a different mix is a different data set (train_info.json records it).
struct SceneMix {
  // Share of the moving-object and camera-pan scenes whose direction is up or down (the rest left or
  // right, each half and half); < 0: the seed's uniform draw over the four directions (a share of 0.5,
  // with the draws of the original data set).
  double vertical_share = -1;
};

// Scene `index` of the data set made with `seed`. Training scenes never carry a held-out caption.
SceneSpec make_scene(uint64_t seed, uint64_t index, const SceneMix& mix = {});

// The 40 held-out moving-object scenes of the evaluation: captions that make_scene never produces
// (two per colour x direction), with fixed seeds for their parameters.
std::vector<SceneSpec> heldout_scenes(int count = 40);
// The 40 moving-object scenes of wan22-tiny's prompt set (prompts/wan22-tiny: what the demo and the gate
// generate with the trained model), also never trained on and distinct from the evaluation's.
std::vector<SceneSpec> prompt_scenes();
// prompts/wan22-tiny as JSON lines (the harness's prompt format): the first 20 prompt scenes are the
// visible splits (smoke 3 in val 8 in core 20), the other 20 the held-out ones (heldout16 in heldout60).
std::string tiny_prompts_visible_jsonl();
std::string tiny_prompts_heldout_jsonl();
// True for the captions of both sets above.
bool is_heldout_caption(const std::string& caption);

// Every word that can appear in a caption (for the tokenizer test).
std::vector<std::string> caption_vocabulary();

struct Rendered {
  at::Tensor video;  // [B, 3, T, H, W] float32 in [-1, 1]
  at::Tensor alpha;  // [B, T, H, W] float32 in [0, 1]: the object's coverage
};
// Renders the scenes at height x width with `frames` frames (t = 0..1 spread over them) on `device`.
// With `timeline` > 0, the frames are instead a window of a clip of `timeline` frames: scene b's frame i
// is that clip's frame start[b] + i (the motion per frame of the full clip, not a faster one).
Rendered render(const std::vector<SceneSpec>& scenes, int64_t frames, int64_t height, int64_t width,
                const at::Device& device, int64_t timeline = 0, const std::vector<int64_t>& start = {});

}  // namespace autooptim::train
