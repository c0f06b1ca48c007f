#include "train/scenes.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <cstdio>
#include <set>
#include <sstream>

#include "base/error.h"

namespace autooptim::train {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Saturated colours whose hues are well apart (red 0, yellow 55, green 130, blue 225, purple 285 degrees),
// so a colour segmentation of a blurry clip can still tell them apart.
const std::array<std::array<float, 3>, 5> kPalette = {{{0.92f, 0.12f, 0.10f},
                                                       {0.95f, 0.85f, 0.10f},
                                                       {0.10f, 0.80f, 0.22f},
                                                       {0.12f, 0.30f, 0.95f},
                                                       {0.68f, 0.18f, 0.88f}}};

// splitmix64: a stable per-scene seed from (seed, index).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  explicit Rng(uint64_t s) : g(s) {}
  std::mt19937_64 g;
  // Our own mapping from 64-bit draws, not std::uniform_*_distribution: those differ between standard
  // libraries, and a seed must give the same scenes everywhere.
  double uniform(double lo = 0, double hi = 1) { return lo + (hi - lo) * static_cast<double>(g() >> 11) * 0x1.0p-53; }
  int below(int n) { return static_cast<int>(g() % static_cast<uint64_t>(n)); }
};

std::string caption_of(const SceneSpec& s) {
  const auto& C = color_names();
  const auto& S = shape_names();
  const auto& D = direction_names();
  const std::string bg = background_names()[s.background];
  const std::string obj = C[s.color] + " " + S[s.shape];
  switch (s.kind) {
    case SceneKind::kMove:
      return "a " + obj + " " + (s.quick ? "quickly" : "slowly") + " moves " + D[s.direction] + " across a " + bg +
             " background";
    case SceneKind::kSpin:
      return "a " + obj + " spins on a " + bg + " background";
    case SceneKind::kGrow:
      return "a " + obj + " grows on a " + bg + " background";
    case SceneKind::kShrink:
      return "a " + obj + " shrinks on a " + bg + " background";
    case SceneKind::kPan:
      return "the camera pans " + D[s.direction] + " past a " + obj + " on a " + bg + " background";
    case SceneKind::kRecolor:
      return "a " + S[s.shape] + " turns from " + C[s.color] + " to " + C[s.color2] + " on a " + bg + " background";
  }
  return "";
}

void jitter_color(Rng& r, int color, float* out) {
  const float bright = static_cast<float>(r.uniform(0.82, 1.0));
  for (int c = 0; c < 3; ++c)
    out[c] = std::clamp(kPalette[static_cast<size_t>(color)][static_cast<size_t>(c)] * bright +
                            static_cast<float>(r.uniform(-0.05, 0.05)),
                        0.0f, 1.0f);
}

// Background colours: dark and low in saturation, so the object is the only saturated thing.
void background_colors(Rng& r, int bg, float* a, float* b) {
  double la = 0, lb = 0;
  switch (bg) {
    case 0:
      la = lb = r.uniform(0.03, 0.15);
      break;  // dark
    case 1:
      la = lb = r.uniform(0.28, 0.42);
      break;  // gray
    case 2:
      la = r.uniform(0.04, 0.18);
      lb = la + r.uniform(0.12, 0.25);
      break;  // striped
    case 3:
      la = r.uniform(0.04, 0.18);
      lb = la + r.uniform(0.12, 0.25);
      break;  // checkered
    default:
      la = r.uniform(0.02, 0.10);
      lb = r.uniform(0.28, 0.42);
      break;  // soft gradient
  }
  for (int c = 0; c < 3; ++c) {
    a[c] = static_cast<float>(la + r.uniform(-0.025, 0.025));
    b[c] = static_cast<float>(lb + r.uniform(-0.025, 0.025));
  }
}

// The continuous parameters of a scene whose discrete choices (kind, colours, shape, direction,
// background, speed) are set.
void fill_continuous(SceneSpec& s, Rng& r) {
  jitter_color(r, s.color, s.rgb);
  if (s.kind == SceneKind::kRecolor)
    jitter_color(r, s.color2, s.rgb2);
  else
    std::copy(s.rgb, s.rgb + 3, s.rgb2);
  background_colors(r, s.background, s.bg_a, s.bg_b);
  s.bg_angle = static_cast<float>(r.uniform(0, kPi));
  // Periods the 16x VAE can represent (over two latent pixels), so reconstruction has room for the object.
  s.bg_period = static_cast<float>(r.uniform(0.4, 0.75));
  s.tex_period = static_cast<float>(r.uniform(0.5, 1.2));
  s.tex_amp = static_cast<float>(r.uniform(0.0, 0.18));
  s.radius = s.radius1 = static_cast<float>(r.uniform(0.12, 0.18));
  s.angle0 = static_cast<float>(r.uniform(0, 2 * kPi));
  s.angle1 = s.angle0 + static_cast<float>(r.uniform(-0.8, 0.8));
  s.x0 = s.x1 = static_cast<float>(r.uniform(0.3, 0.7));
  s.y0 = s.y1 = static_cast<float>(r.uniform(0.35, 0.65));
  switch (s.kind) {
    case SceneKind::kMove:
    case SceneKind::kPan: {
      // Travel as a fraction of the frame along the motion's axis; the object stays inside the frame.
      const bool horizontal = s.direction < 2;
      const double travel = horizontal ? (s.quick ? r.uniform(0.42, 0.55) : r.uniform(0.22, 0.32))
                                       : (s.quick ? r.uniform(0.36, 0.44) : r.uniform(0.22, 0.30));
      const double sign = (s.direction == 0 || s.direction == 2) ? -1.0 : 1.0;  // left/up: decreasing
      // kPan: the camera moves `direction`, so the object and the background move the other way.
      const double move = s.kind == SceneKind::kPan ? -sign * travel : sign * travel;
      const double lo = horizontal ? 0.14 : 0.22, hi = 1.0 - lo;
      double start = move < 0 ? r.uniform(std::max(lo, lo - move), hi) : r.uniform(lo, std::min(hi, hi - move));
      if (horizontal) {
        s.x0 = static_cast<float>(start);
        s.x1 = static_cast<float>(start + move);
        s.y1 = s.y0 + static_cast<float>(r.uniform(-0.04, 0.04));
      } else {
        s.y0 = static_cast<float>(start);
        s.y1 = static_cast<float>(start + move);
        s.x1 = s.x0 + static_cast<float>(r.uniform(-0.04, 0.04));
      }
      if (s.kind == SceneKind::kPan) {
        s.pan_x = horizontal ? s.x1 - s.x0 : 0.0f;
        s.pan_y = horizontal ? 0.0f : s.y1 - s.y0;
        s.angle1 = s.angle0;
      }
      break;
    }
    case SceneKind::kSpin:
      s.angle1 = s.angle0 + static_cast<float>((r.below(2) ? 1 : -1) * r.uniform(1.5 * kPi, 3 * kPi));
      break;
    case SceneKind::kGrow:
      s.radius = static_cast<float>(r.uniform(0.07, 0.10));
      s.radius1 = static_cast<float>(r.uniform(0.20, 0.26));
      break;
    case SceneKind::kShrink:
      s.radius = static_cast<float>(r.uniform(0.20, 0.26));
      s.radius1 = static_cast<float>(r.uniform(0.07, 0.10));
      break;
    case SceneKind::kRecolor:
      break;
  }
}

struct HeldoutTable {
  std::vector<SceneSpec> scenes;
  std::set<std::string> captions;
};

const HeldoutTable& heldout_table() {
  static const HeldoutTable t = [] {
    HeldoutTable h;
    Rng r(0x5eedc0ffee12ull);
    const int nc = static_cast<int>(color_names().size()), nd = static_cast<int>(direction_names().size());
    // Four rounds of one caption per colour x direction: rounds 0-1 are the evaluation's 40 captions,
    // rounds 2-3 the tiny model's prompt set (prompts/wan22-tiny); none of the 80 is ever trained on.
    for (int rep = 0; rep < 4; ++rep)
      for (int c = 0; c < nc; ++c)
        for (int d = 0; d < nd; ++d) {
          SceneSpec s;
          s.kind = SceneKind::kMove;
          s.color = c;
          s.direction = d;
          do {
            s.shape = r.below(static_cast<int>(shape_names().size()));
            s.background = r.below(static_cast<int>(background_names().size()));
            s.quick = r.below(2) == 1;
            s.caption = caption_of(s);
          } while (h.captions.count(s.caption));
          fill_continuous(s, r);
          h.captions.insert(s.caption);
          h.scenes.push_back(s);
        }
    return h;
  }();
  return t;
}

}  // namespace

const char* kind_name(SceneKind k) {
  switch (k) {
    case SceneKind::kMove:
      return "move";
    case SceneKind::kSpin:
      return "spin";
    case SceneKind::kGrow:
      return "grow";
    case SceneKind::kShrink:
      return "shrink";
    case SceneKind::kPan:
      return "pan";
    case SceneKind::kRecolor:
      return "recolor";
  }
  return "?";
}

const std::vector<std::string>& color_names() {
  static const std::vector<std::string> v{"red", "yellow", "green", "blue", "purple"};
  return v;
}
const std::vector<std::string>& shape_names() {
  static const std::vector<std::string> v{"circle", "square", "triangle"};
  return v;
}
const std::vector<std::string>& direction_names() {
  static const std::vector<std::string> v{"left", "right", "up", "down"};
  return v;
}
const std::vector<std::string>& background_names() {
  static const std::vector<std::string> v{"dark", "gray", "striped", "checkered", "soft"};
  return v;
}
std::array<float, 3> color_rgb(int color) { return kPalette.at(static_cast<size_t>(color)); }

nlohmann::json SceneSpec::truth() const {
  nlohmann::json j = {{"kind", kind_name(kind)},
                      {"caption", caption},
                      {"color", color_names()[color]},
                      {"shape", shape_names()[shape]},
                      {"background", background_names()[background]}};
  if (kind == SceneKind::kMove) {
    j["direction"] = direction_names()[direction];
    j["speed"] = quick ? "quickly" : "slowly";
  }
  if (kind == SceneKind::kPan) {
    j["camera_direction"] = direction_names()[direction];
    j["direction"] = direction_names()[direction ^ 1];  // the object moves the other way in the frame
  }
  if (kind == SceneKind::kRecolor) j["color_end"] = color_names()[color2];
  j["start"] = {x0, y0};
  j["end"] = {x1, y1};
  return j;
}

SceneSpec make_scene(uint64_t seed, uint64_t index, const SceneMix& scene_mix) {
  Rng r(mix(mix(seed) ^ (index * 0xd1b54a32d192ed03ull)));
  SceneSpec s;
  // Mostly moving objects (what the evaluation asks for), the rest the other kinds of motion.
  const double k = r.uniform();
  s.kind = k < 0.6    ? SceneKind::kMove
           : k < 0.68 ? SceneKind::kSpin
           : k < 0.74 ? SceneKind::kGrow
           : k < 0.80 ? SceneKind::kShrink
           : k < 0.90 ? SceneKind::kPan
                      : SceneKind::kRecolor;
  const int nc = static_cast<int>(color_names().size());
  do {
    s.color = r.below(nc);
    s.color2 = (s.color + 1 + r.below(nc - 1)) % nc;
    s.shape = r.below(static_cast<int>(shape_names().size()));
    s.direction = r.below(static_cast<int>(direction_names().size()));
    // (extra draws only when a mix is asked for: the default data set keeps its stream of draws)
    if (scene_mix.vertical_share >= 0) s.direction = (r.uniform() < scene_mix.vertical_share ? 2 : 0) + r.below(2);
    s.background = r.below(static_cast<int>(background_names().size()));
    s.quick = r.below(2) == 1;
    s.caption = caption_of(s);
  } while (is_heldout_caption(s.caption));
  fill_continuous(s, r);
  return s;
}

std::vector<SceneSpec> heldout_scenes(int count) {
  const auto& all = heldout_table().scenes;
  if (count < 0 || count > 40) throw Error("held-out scenes: " + std::to_string(count) + " asked, 40 exist");
  return {all.begin(), all.begin() + count};
}

std::vector<SceneSpec> prompt_scenes() {
  const auto& all = heldout_table().scenes;
  return {all.begin() + 40, all.end()};
}

namespace {
std::string prompt_lines(bool heldout) {
  const auto scenes = prompt_scenes();
  std::string out;
  for (int i = 0; i < 20; ++i) {
    // Stepping by 7 (coprime with 20) through each half spreads colours and directions over the
    // nested splits: smoke's 3 prompts are 3 colours and 3 directions.
    const int k = (heldout ? 20 : 0) + (i * 7) % 20;
    const SceneSpec& s = scenes[static_cast<size_t>(k)];
    char id[16];
    std::snprintf(id, sizeof id, "tiny-%02d", (heldout ? 21 : 1) + i);
    nlohmann::json splits = heldout ? (i < 16 ? nlohmann::json{"heldout16", "heldout60"} : nlohmann::json{"heldout60"})
                                    : (i < 3   ? nlohmann::json{"smoke", "val", "core"}
                                       : i < 8 ? nlohmann::json{"val", "core"}
                                               : nlohmann::json{"core"});
    nlohmann::ordered_json j;
    j["id"] = id;
    j["category"] = s.quick ? "motion-heavy" : "low-motion";
    j["prompt"] = s.caption;
    j["splits"] = splits;
    out += j.dump() + "\n";
  }
  return out;
}
}  // namespace

std::string tiny_prompts_visible_jsonl() { return prompt_lines(false); }
std::string tiny_prompts_heldout_jsonl() { return prompt_lines(true); }

bool is_heldout_caption(const std::string& caption) { return heldout_table().captions.count(caption) > 0; }

std::vector<std::string> caption_vocabulary() {
  std::vector<std::string> v{"a",       "quickly", "slowly", "moves", "across", "background", "spins", "on", "grows",
                             "shrinks", "the",     "camera", "pans",  "past",   "turns",      "from",  "to"};
  for (const auto* list : {&color_names(), &shape_names(), &direction_names(), &background_names()})
    v.insert(v.end(), list->begin(), list->end());
  return v;
}

Rendered render(const std::vector<SceneSpec>& scenes, int64_t frames, int64_t height, int64_t width,
                const at::Device& device, int64_t timeline, const std::vector<int64_t>& start) {
  if (scenes.empty()) throw Error("render: no scenes");
  if (timeline > 0) {
    if (start.size() != scenes.size()) throw Error("render: a window of a timeline needs one start per scene");
    for (const int64_t s0 : start)
      if (s0 < 0 || s0 + frames > timeline) throw Error("render: window outside the timeline");
  }
  if (frames < 1 || height < 1 || width < 1) throw Error("render: frames, height and width must be positive");
  const int64_t B = static_cast<int64_t>(scenes.size()), T = frames, H = height, W = width;
  const double aspect = static_cast<double>(W) / static_cast<double>(H);
  // Per-scene parameters as columns [B, n] on the CPU, then one copy to the device.
  const int64_t P = 40;
  at::Tensor par = at::zeros({B, P}, at::kFloat);
  auto acc = par.accessor<float, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const SceneSpec& s = scenes[static_cast<size_t>(b)];
    float* p = &acc[b][0];
    p[0] = s.x0 * static_cast<float>(aspect), p[1] = s.y0, p[2] = s.x1 * static_cast<float>(aspect), p[3] = s.y1;
    p[4] = s.radius, p[5] = s.radius1, p[6] = s.angle0, p[7] = s.angle1;
    for (int c = 0; c < 3; ++c) {
      p[8 + c] = s.rgb[c];
      p[11 + c] = s.rgb2[c];
      p[14 + c] = s.bg_a[c];
      p[17 + c] = s.bg_b[c];
    }
    p[20] = s.bg_angle, p[21] = s.bg_period, p[22] = s.pan_x * static_cast<float>(aspect), p[23] = s.pan_y;
    p[24] = s.tex_period, p[25] = s.tex_amp;
    p[26] = s.shape == 0, p[27] = s.shape == 1, p[28] = s.shape == 2;
    p[29] = s.background == 2, p[30] = s.background == 3, p[31] = s.background == 4;
  }
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  par = par.to(device);
  auto col = [&](int64_t i) { return par.select(1, i).reshape({B, 1, 1, 1}); };  // [B, 1, 1, 1]
  at::Tensor t = (T > 1 ? at::linspace(0, 1, T, opts) : at::zeros({1}, opts)).view({1, T, 1, 1});
  if (timeline > 0) {
    const at::Tensor s0 = at::tensor(start, at::kLong).to(at::kFloat).to(device).view({B, 1, 1, 1});
    t = (s0 + at::arange(T, opts).view({1, T, 1, 1})) / static_cast<double>(std::max<int64_t>(1, timeline - 1));
  }
  const at::Tensor X = ((at::arange(W, opts) + 0.5) / static_cast<double>(H)).view({1, 1, 1, W});
  const at::Tensor Y = ((at::arange(H, opts) + 0.5) / static_cast<double>(H)).view({1, 1, H, 1});
  auto lerp = [&](int64_t a, int64_t b) { return col(a) + (col(b) - col(a)) * t; };  // [B, T, 1, 1]
  const at::Tensor cx = lerp(0, 2), cy = lerp(1, 3), rad = lerp(4, 5), ang = lerp(6, 7);
  const at::Tensor dx = X - cx, dy = Y - cy;  // [B, T, H, W]
  const at::Tensor ca = ang.cos(), sa = ang.sin();
  const at::Tensor u = dx * ca + dy * sa, v = dy * ca - dx * sa;
  const at::Tensor d_circle = (u * u + v * v).sqrt() - rad;
  const at::Tensor d_square = at::max(u.abs(), v.abs()) - 0.85 * rad;
  at::Tensor d_tri;
  for (int k = 0; k < 3; ++k) {
    const double th = -kPi / 2 + 2 * kPi * k / 3;
    const at::Tensor e = u * std::cos(th) + v * std::sin(th);
    d_tri = k == 0 ? e : at::max(d_tri, e);
  }
  d_tri = d_tri - 0.6 * rad;
  const at::Tensor dist = d_circle * col(26) + d_square * col(27) + d_tri * col(28);
  const at::Tensor alpha = (0.5 - dist * static_cast<double>(H)).clamp(0, 1);  // one-pixel antialiased edge
  const at::Tensor tex = 1 + col(25) * at::sin(2 * kPi * u / (col(24) * rad));
  // Background sampled at the panned coordinates.
  const at::Tensor Xb = X - col(22) * t, Yb = Y - col(23) * t;
  const at::Tensor s_lin = Xb * col(20).cos() + Yb * col(20).sin();
  const at::Tensor stripes = 0.5 + 0.5 * at::tanh(3 * at::sin(2 * kPi * s_lin / col(21)));
  const at::Tensor checks = 0.5 + 0.5 * at::tanh(6 * at::sin(2 * kPi * Xb / col(21)) * at::sin(2 * kPi * Yb / col(21)));
  const at::Tensor soft = 0.5 + 0.5 * at::sin(2 * kPi * s_lin / (2.5 * aspect));
  const at::Tensor w = stripes * col(29) + checks * col(30) + soft * col(31);  // [B, T, H, W]; 0 for plain
  std::vector<at::Tensor> chans;
  for (int64_t c = 0; c < 3; ++c) {
    const at::Tensor bg = col(14 + c) + (col(17 + c) - col(14 + c)) * w;
    const at::Tensor obj = lerp(8 + c, 11 + c) * tex;
    chans.push_back(bg + (obj - bg) * alpha);
  }
  Rendered r;
  r.video = (at::stack(chans, 1).clamp(0, 1) * 2 - 1).contiguous();  // [B, 3, T, H, W]
  r.alpha = alpha.contiguous();
  return r;
}

std::vector<std::string> words_outside_captions(const std::string& prompt) {
  static const std::set<std::string> vocabulary = [] {
    std::set<std::string> v;
    SceneSpec s;
    for (const SceneKind k : {SceneKind::kMove, SceneKind::kSpin, SceneKind::kGrow, SceneKind::kShrink, SceneKind::kPan,
                              SceneKind::kRecolor})
      for (const bool quick : {false, true})
        for (int c = 0; c < static_cast<int>(color_names().size()); ++c)
          for (int sh = 0; sh < static_cast<int>(shape_names().size()); ++sh)
            for (int d = 0; d < static_cast<int>(direction_names().size()); ++d)
              for (int b = 0; b < static_cast<int>(background_names().size()); ++b) {
                s.kind = k, s.quick = quick, s.color = s.color2 = c, s.shape = sh, s.direction = d, s.background = b;
                std::istringstream words(caption_of(s));
                for (std::string w; words >> w;) v.insert(w);
              }
    return v;
  }();
  std::vector<std::string> outside;
  std::string word;
  auto flush = [&] {
    if (!word.empty() && !vocabulary.count(word) && std::find(outside.begin(), outside.end(), word) == outside.end())
      outside.push_back(word);
    word.clear();
  };
  for (const char ch : prompt) {
    if (std::isalpha(static_cast<unsigned char>(ch)))
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    else
      flush();
  }
  flush();
  return outside;
}

}  // namespace autooptim::train
