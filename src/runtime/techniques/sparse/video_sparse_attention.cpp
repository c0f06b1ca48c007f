// Sparse-attention technique: training-free patterns for the video tokens of self-attention (see
// video_sparse_attention.h).
#include <algorithm>
#include <limits>
#include <string>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(sparse) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Technique t;
  t.name = "sparse";
  t.family = "sparse";
  t.lossless = false;
  t.summary = "training-free sparse patterns for self-attention over the video tokens (dense first layers and steps)";
  t.group = "sparse";
  t.flags = always_written({
      choice_flag("pattern", field(&SparseAttentionOptions::pattern),
                  {"none", "spatial_temporal", "tile_window", "frame_window", "topk_blocks"},
                  "none | spatial_temporal | tile_window | frame_window | topk_blocks"),
      int_flag("window_frames", field(&SparseAttentionOptions::window_frames), 0, kMax,
               "tile_window, frame_window: half-width in latent frames"),
      int_flag("window_tiles", field(&SparseAttentionOptions::window_tiles), 0, kMax,
               "tile_window: half-width in spatial tiles"),
      int_flag("dense_layers", field(&SparseAttentionOptions::dense_layers), 0, kMax, "first layers kept dense"),
      int_flag("dense_steps", field(&SparseAttentionOptions::dense_steps), 0, kMax, "first steps kept dense"),
  });
  // Later than the registry: written only when it differs from its default.
  t.flags.push_back(int_flag("query_frames", field(&SparseAttentionOptions::query_frames), 1, kMax,
                             "frame_window, topk_blocks: latent frames per query chunk"));
  t.flags.push_back(number_flag("keep_ratio", field(&SparseAttentionOptions::keep_ratio), 0.0, true, 1.0, false,
                                "topk_blocks: share of key blocks attended exactly (the rest pooled)"));
  t.flags.push_back(int_flag("key_block_rows", field(&SparseAttentionOptions::key_block_rows), 1, 4096,
                             "topk_blocks: latent rows per key block (the largest divisor of the rows up to this)"));
  t.switch_flag = "sparse.pattern";
  t.hooks = {"self_attention.attention"};
  t.engagement = {{"sparse.attention.calls", "sparse is on but no sparse attention ran"}};
  t.check_counters = [](const RuntimeOptions&, const Trace& tr, std::vector<std::string>& out) {
    const double d = tr.get("sparse.attention.density");
    if (tr.get("sparse.attention.calls") > 0 && !(d > 0 && d < 1))
      out.push_back("sparse: achieved attention density " + std::to_string(d) + " is not below 1");
  };
  t.search = [](const SearchContext& c) {
    // Dense steps as a fraction of the run's steps (10 and 20 of 50).
    const int64_t ds10 = std::max<int64_t>(1, c.steps / 5), ds20 = std::max<int64_t>(1, 2 * c.steps / 5);
    std::vector<SearchPoint> p;
    for (int64_t ds : {ds10, ds20})
      p.push_back({"st-ds" + std::to_string(ds),
                   {{"sparse", {{"pattern", "spatial_temporal"}, {"dense_layers", 1}, {"dense_steps", ds}}}}});
    // The frame window at about half and a quarter of the pairs at 31 latent frames (chunks of 4 frames
    // fill the GPU; one-frame chunks leave it underfilled), dense for the first fifth of the steps.
    for (int64_t wf : {7, 2})
      p.push_back({"fw-q4-w" + std::to_string(wf) + "-ds" + std::to_string(ds10),
                   {{"sparse",
                     {{"pattern", "frame_window"},
                      {"window_frames", wf},
                      {"query_frames", 4},
                      {"dense_layers", 1},
                      {"dense_steps", ds10}}}}});
    // Top-k key blocks per chunk of 4 query frames, the rest pooled: about half and a quarter of the blocks
    // (one-frame chunks measured slower than dense: they underfill the GPU, as with the frame window).
    for (const double r : {0.5, 0.25})
      p.push_back({"topk-" + std::to_string(static_cast<int>(r * 100)) + "-ds" + std::to_string(ds10),
                   {{"sparse",
                     {{"pattern", "topk_blocks"},
                      {"keep_ratio", r},
                      {"key_block_rows", 2},
                      {"query_frames", 4},
                      {"dense_layers", 1},
                      {"dense_steps", ds10}}}}});
    for (int64_t wf : {1, 2})
      p.push_back({"tw-f" + std::to_string(wf) + "-ds10",
                   {{"sparse",
                     {{"pattern", "tile_window"},
                      {"window_frames", wf},
                      {"window_tiles", 0},
                      {"dense_layers", 1},
                      {"dense_steps", ds10}}}}});
    return p;
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/techniques/sparse/video_sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "runtime/techniques/kernel/attention_backend.h"
#include "runtime/torch_compat.h"

namespace autooptim::runtime::techniques {
namespace {

void record(const ForwardContext& fc, double attended, double total, bool sparse) {
  if (!fc.trace) return;
  fc.trace->add(sparse ? "sparse.attention.calls" : "sparse.attention.dense_calls");
  fc.trace->add("sparse.attention.pairs_attended", attended);
  fc.trace->add("sparse.attention.pairs_total", total);
  fc.trace->define_ratio("sparse.attention.density", "sparse.attention.pairs_attended", "sparse.attention.pairs_total");
}

// Tile size along an axis of n positions for half-width w: 2w+1 when it divides n, else the whole axis.
int64_t tile(int64_t n, int64_t w) {
  const int64_t s = 2 * w + 1;
  return (w > 0 && s < n && n % s == 0) ? s : n;
}

// Largest divisor of n that is at most want (at least 1).
int64_t divisor_at_most(int64_t n, int64_t want) {
  for (int64_t r = std::min(n, std::max<int64_t>(1, want)); r > 1; --r)
    if (n % r == 0) return r;
  return 1;
}

// topk_blocks: key blocks are `rows` latent rows of one frame (bt tokens; f-major tokens make each one
// contiguous). Per query chunk (query_frames frames) and head, the blocks whose mean key scores highest
// against the chunk's mean query, plus the chunk's own frames, are attended exactly: their tokens are
// gathered (whole blocks, one index_select) and one fused attention call returns the output and each
// query's log-sum-exp. Every other block enters the same softmax as one pooled key (its mean key, logit
// raised by log(bt): it stands for bt keys) with its mean value; the two parts are merged through the
// log-sum-exp, so the exact part runs on the fast kernel at the model's head size.
at::Tensor topk_blocks_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const ForwardContext& fc) {
  const auto& s = fc.options->of<SparseAttentionOptions>();
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3);
  const int64_t F = fc.grid_f, Hh = fc.grid_h, W = fc.grid_w, P = Hh * W;
  const int64_t rows = divisor_at_most(Hh, s.key_block_rows), bt = rows * W, per_frame = Hh / rows, nkb = F * per_frame;
  const int64_t c = std::max<int64_t>(1, s.query_frames);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // Pooled keys and values per block [B, H, nkb, d], means in float32.
  const at::Tensor kb = k.reshape({B, H, nkb, bt, d}).to(at::kFloat).mean(3);
  const at::Tensor vb = v.reshape({B, H, nkb, bt, d}).to(at::kFloat).mean(3);
  const at::Tensor kb_t = kb.to(q.scalar_type()).transpose(2, 3);  // [B, H, d, nkb]
  const at::Tensor k_blocks = k.reshape({B * H * nkb, bt, d});
  const at::Tensor v_blocks = v.reshape({B * H * nkb, bt, d});
  const at::Tensor bh = (at::arange(B * H, q.options().dtype(at::kLong)) * nkb).view({B, H, 1});
  const int64_t own_max = std::min(c, F) * per_frame;
  const int64_t kk = std::min(nkb, std::max(own_max, static_cast<int64_t>(std::ceil(s.keep_ratio * nkb))));
  at::Tensor out = at::empty({B, L, H, d}, q.options());
  const double log_bt = std::log(static_cast<double>(bt));
  double attended = 0;
  for (int64_t f0 = 0; f0 < F; f0 += c) {
    const int64_t f1 = std::min(F, f0 + c), n = (f1 - f0) * P;
    const at::Tensor qj = q.narrow(2, f0 * P, n);  // [B, H, n, d]
    // Scores of every key block against the chunk's mean query; the chunk's own frames always in.
    at::Tensor score = at::matmul(qj.to(at::kFloat).mean(2, true), kb.transpose(2, 3)).squeeze(2);  // [B, H, nkb]
    score.narrow(2, f0 * per_frame, (f1 - f0) * per_frame).fill_(std::numeric_limits<float>::infinity());
    const at::Tensor sel = std::get<1>(score.topk(kk, 2));  // [B, H, kk]
    const at::Tensor idx = (bh + sel).reshape({-1});
    const at::Tensor kg = k_blocks.index_select(0, idx).view({B, H, kk * bt, d});
    const at::Tensor vg = v_blocks.index_select(0, idx).view({B, H, kk * bt, d});
    const auto [o1, lse1] = compat::sdpa_with_lse(qj, kg, vg);  // [B, H, n, d], [B, H, n]
    // The pooled blocks not attended exactly: logits [B, H, n, nkb], the chosen ones at -inf.
    at::Tensor pooled = at::matmul(qj, kb_t).to(at::kFloat).mul_(scale).add_(log_bt);
    at::Tensor chosen = at::zeros({B, H, 1, nkb}, pooled.options());
    chosen.scatter_(3, sel.unsqueeze(2), -std::numeric_limits<float>::infinity());
    pooled.add_(chosen);
    const at::Tensor m = at::maximum(lse1, std::get<0>(pooled.max(3)));  // [B, H, n]
    const at::Tensor w1 = at::exp(lse1 - m).unsqueeze(3);                // [B, H, n, 1]
    const at::Tensor wp = at::exp(pooled - m.unsqueeze(3));              // [B, H, n, nkb]
    const at::Tensor den = w1 + wp.sum(3, true);
    const at::Tensor o = (o1.to(at::kFloat) * w1 + at::matmul(wp, vb)) / den;
    out.narrow(1, f0 * P, n).copy_(o.transpose(1, 2));
    attended += static_cast<double>(B) * H * n * static_cast<double>(kk * bt + nkb);
  }
  record(fc, attended, static_cast<double>(L) * L * B * H, true);
  return out.transpose(1, 2);
}

}  // namespace

bool sparse_step(const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->of<SparseAttentionOptions>().pattern == "none") return false;
  return fc->step >= fc->options->of<SparseAttentionOptions>().dense_steps;
}

bool sparse_engaged(const ForwardContext* fc) {
  return sparse_step(fc) && fc->layer >= fc->options->of<SparseAttentionOptions>().dense_layers && fc->grid_f > 0;
}

void count_dense_attention(const at::Tensor& q, const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->of<SparseAttentionOptions>().pattern == "none") return;
  const double L = static_cast<double>(q.size(2));
  record(*fc, L * L * q.size(0) * q.size(1), L * L * q.size(0) * q.size(1), false);
}

at::Tensor sparse_self_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const ForwardContext& fc) {
  const auto& s = fc.options->of<SparseAttentionOptions>();
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3);
  const int64_t F = fc.grid_f, Hh = fc.grid_h, W = fc.grid_w, P = Hh * W;
  if (F * P != L) throw Error("sparse attention: token count does not match the latent grid");
  const double total = static_cast<double>(L) * L * B * H;
  if (s.pattern == "spatial_temporal") {
    const int64_t hs = H / 2, ht = H - hs;     // spatial heads first, temporal heads after
    auto spatial = [&](const at::Tensor& x) {  // [B, hs, F*P, d] -> [B*F, hs, P, d]
      return x.slice(1, 0, hs).reshape({B, hs, F, P, d}).permute({0, 2, 1, 3, 4}).reshape({B * F, hs, P, d});
    };
    auto temporal = [&](const at::Tensor& x) {  // [B, ht, F*P, d] -> [B*P, ht, F, d]
      return x.slice(1, hs, H).reshape({B, ht, F, P, d}).permute({0, 3, 1, 2, 4}).reshape({B * P, ht, F, d});
    };
    const at::Tensor os = attention(spatial(q), spatial(k), spatial(v), &fc)
                              .reshape({B, F, hs, P, d})
                              .permute({0, 2, 1, 3, 4})
                              .reshape({B, hs, L, d});
    const at::Tensor ot = attention(temporal(q), temporal(k), temporal(v), &fc)
                              .reshape({B, P, ht, F, d})
                              .permute({0, 2, 3, 1, 4})
                              .reshape({B, ht, L, d});
    const double attended =
        static_cast<double>(B) * (hs * F * static_cast<double>(P) * P + ht * P * static_cast<double>(F) * F);
    record(fc, attended, total, true);
    return at::cat({os, ot}, 1);
  }
  if (s.pattern == "tile_window") {
    // Frames are split into tiles of 2*window_frames+1; when that does not divide the latent frames
    // (31 at 121 frames, a prime), the last, shorter tile is attended on its own. Tokens are f-major,
    // so each group of frames is one contiguous token range.
    const int64_t th = tile(Hh, s.window_tiles), tw = tile(W, s.window_tiles);
    const int64_t want = 2 * s.window_frames + 1;
    const int64_t tf = (s.window_frames > 0 && want < F) ? want : F;
    const int64_t main_f = (F / tf) * tf, rest_f = F - main_f;
    double attended = 0;
    auto tiled = [&](const at::Tensor& qq, const at::Tensor& kk, const at::Tensor& vv, int64_t frames, int64_t tfr) {
      const int64_t nf = frames / tfr, nh = Hh / th, nw = W / tw, n = tfr * th * tw;
      auto group = [&](const at::Tensor& x) {  // [B, H, frames*Hh*W, d] -> [B*tiles, H, n, d]
        return x.reshape({B, H, nf, tfr, nh, th, nw, tw, d})
            .permute({0, 2, 4, 6, 1, 3, 5, 7, 8})
            .reshape({B * nf * nh * nw, H, n, d});
      };
      at::Tensor o = attention(group(qq), group(kk), group(vv), &fc);
      attended += static_cast<double>(B) * H * (nf * nh * nw) * static_cast<double>(n) * n;
      return o.reshape({B, nf, nh, nw, H, tfr, th, tw, d})
          .permute({0, 4, 1, 5, 2, 6, 3, 7, 8})
          .reshape({B, H, frames * P, d});
    };
    at::Tensor o = tiled(q.slice(2, 0, main_f * P), k.slice(2, 0, main_f * P), v.slice(2, 0, main_f * P), main_f, tf);
    if (rest_f > 0)
      o = at::cat({o, tiled(q.slice(2, main_f * P), k.slice(2, main_f * P), v.slice(2, main_f * P), rest_f, rest_f)},
                  2);
    record(fc, attended, total, true);
    return o;
  }
  if (s.pattern == "frame_window") {
    // A sliding window over latent frames: queries in chunks of query_frames consecutive frames, each
    // chunk attending to the frames from window_frames before its first to window_frames after its last.
    // Tokens are f-major, so every chunk's queries and keys are contiguous token ranges: each chunk is
    // one fused attention call on views of q, k, v (no gather, no mask), written into its rows of out.
    const int64_t c = std::max<int64_t>(1, s.query_frames), w = std::max<int64_t>(0, s.window_frames);
    at::Tensor out = at::empty({B, L, H, d}, q.options());  // the layout the caller flattens to [B, L, D]
    double attended = 0;
    for (int64_t f0 = 0; f0 < F; f0 += c) {
      const int64_t f1 = std::min(F, f0 + c), k0 = std::max<int64_t>(0, f0 - w), k1 = std::min(F, f1 + w);
      const at::Tensor o = attention(q.narrow(2, f0 * P, (f1 - f0) * P), k.narrow(2, k0 * P, (k1 - k0) * P),
                                     v.narrow(2, k0 * P, (k1 - k0) * P), &fc);  // [B, H, n, d]
      out.narrow(1, f0 * P, (f1 - f0) * P).copy_(o.transpose(1, 2));
      attended += static_cast<double>(B) * H * ((f1 - f0) * P) * static_cast<double>((k1 - k0) * P);
    }
    record(fc, attended, total, attended < total);
    return out.transpose(1, 2);
  }
  if (s.pattern == "topk_blocks") return topk_blocks_attention(q, k, v, fc);
  throw Error("sparse attention: unknown pattern '" + s.pattern + "'");
}

// The pattern at the self-attention's sparse-pattern point.
AUTOOPTIM_EXTENSIONS(sparse) {
  ext::SparseAttention s;
  s.step_sparse = [](const ForwardContext& fc) { return sparse_step(&fc); };
  s.engaged = [](const ForwardContext& fc) { return sparse_engaged(&fc); };
  s.attend = sparse_self_attention;
  s.dense_call = [](const at::Tensor& q, const ForwardContext& fc) { count_dense_attention(q, &fc); };
  points.sparse_attention.add(
      {"sparse", 10, [](const RuntimeOptions& o) { return o.of<SparseAttentionOptions>().pattern != "none"; }, s});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
