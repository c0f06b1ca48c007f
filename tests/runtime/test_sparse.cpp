// The sparse-attention patterns against dense attention with an explicit mask of the pairs each
// pattern claims to attend: same outputs (float32), and the counted density equals the mask's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "runtime/forward_context.h"
#include "runtime/techniques/sparse/video_sparse_attention.h"

using namespace autooptim::runtime;

namespace {

// softmax(q k^T / sqrt(d) + mask) v, with allowed(head, i, j) deciding each pair.
at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::function<bool(int64_t, int64_t, int64_t)>& allowed, double* density) {
  const int64_t H = q.size(1), L = q.size(2);
  at::Tensor mask = at::full({1, H, L, L}, -INFINITY);
  auto acc = mask.accessor<float, 4>();
  int64_t n = 0;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j)
        if (allowed(h, i, j)) acc[0][h][i][j] = 0, ++n;
  *density = static_cast<double>(n) / (H * L * L);
  const at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3))) + mask;
  return at::matmul(at::softmax(s, -1), v);
}

struct Grid {
  int64_t F, Hh, W;
  int64_t P() const { return Hh * W; }
  int64_t L() const { return F * P(); }
  int64_t f(int64_t t) const { return t / P(); }
  int64_t y(int64_t t) const { return (t % P()) / W; }
  int64_t x(int64_t t) const { return t % W; }
};

void check(const RuntimeOptions& o, const Grid& g, const std::function<bool(int64_t, int64_t, int64_t)>& allowed) {
  const int64_t B = 1, H = 4, d = 8;
  auto gen = at::detail::createCPUGenerator(7);
  const at::Tensor q = at::randn({B, H, g.L(), d}, gen), k = at::randn({B, H, g.L(), d}, gen),
                   v = at::randn({B, H, g.L(), d}, gen);
  Trace trace;
  ForwardContext fc;
  fc.options = &o;
  fc.trace = &trace;
  fc.grid_f = g.F, fc.grid_h = g.Hh, fc.grid_w = g.W;
  fc.layer = 5, fc.step = 10;
  ASSERT_TRUE(techniques::sparse_engaged(&fc));
  const at::Tensor out = techniques::sparse_self_attention(q, k, v, fc);
  double density = 0;
  const at::Tensor ref = masked_attention(q, k, v, allowed, &density);
  EXPECT_LT((out - ref).abs().max().item<double>(), 1e-5);
  EXPECT_NEAR(trace.get("sparse.attention.density"), density, 1e-12);
  EXPECT_LT(density, 1.0);
  EXPECT_EQ(trace.get("sparse.attention.calls"), 1);
}

}  // namespace

TEST(SparseAttention, SpatialTemporalHeadsMatchTheirMask) {
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "spatial_temporal";
  const Grid g{3, 2, 3};
  // Heads 0-1 within their frame, heads 2-3 across frames at the same position.
  check(o, g, [&](int64_t h, int64_t i, int64_t j) {
    return h < 2 ? g.f(i) == g.f(j) : g.y(i) == g.y(j) && g.x(i) == g.x(j);
  });
}

TEST(SparseAttention, TileWindowWithARemainderTileMatchesItsMask) {
  // 7 latent frames in tiles of 3: frames {0,1,2}, {3,4,5} and the remainder {6}; spatial axes whole.
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "tile_window";
  o.of<SparseAttentionOptions>().window_frames = 1;
  o.of<SparseAttentionOptions>().window_tiles = 0;
  const Grid g{7, 2, 2};
  auto tile = [](int64_t f) { return f < 6 ? f / 3 : 2; };
  check(o, g, [&](int64_t, int64_t i, int64_t j) { return tile(g.f(i)) == tile(g.f(j)); });
}

TEST(SparseAttention, TileWindowInFramesAndSpaceMatchesItsMask) {
  // 5 frames in tiles of 3 (remainder of 2) and a 6x3 grid in 3x3 spatial tiles.
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "tile_window";
  o.of<SparseAttentionOptions>().window_frames = 1;
  o.of<SparseAttentionOptions>().window_tiles = 1;
  const Grid g{5, 6, 3};
  auto tile = [&](int64_t t) { return std::make_tuple(g.f(t) < 3 ? 0 : 1, g.y(t) / 3, g.x(t) / 3); };
  check(o, g, [&](int64_t, int64_t i, int64_t j) { return tile(i) == tile(j); });
}

TEST(SparseAttention, FrameWindowMatchesItsMask) {
  // 7 frames, queries one frame at a time, keys within 2 frames: a sliding window clipped at the ends.
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "frame_window";
  o.of<SparseAttentionOptions>().window_frames = 2;
  const Grid g{7, 2, 3};
  check(o, g, [&](int64_t, int64_t i, int64_t j) { return std::abs(g.f(i) - g.f(j)) <= 2; });
}

TEST(SparseAttention, FrameWindowWithQueryChunksAndARemainderMatchesItsMask) {
  // 7 frames in query chunks of 3 ({0,1,2}, {3,4,5}, {6}); each chunk sees 1 frame beyond either end.
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "frame_window";
  o.of<SparseAttentionOptions>().window_frames = 1;
  o.of<SparseAttentionOptions>().query_frames = 3;
  const Grid g{7, 3, 1};
  check(o, g, [&](int64_t, int64_t i, int64_t j) {
    const int64_t f0 = g.f(i) / 3 * 3, f1 = std::min<int64_t>(7, f0 + 3);
    return g.f(j) >= f0 - 1 && g.f(j) < f1 + 1;
  });
}

// topk_blocks against a reference written from its definition, in float64 with loops: per query chunk and
// head the key blocks chosen by mean query x mean key (the chunk's own frames always), exact attention to
// their tokens, and every other block as one key (its mean) with logit + log(block size) and its mean
// value, in one softmax. Batch 2, a remainder chunk, rows that do not divide by the asked block rows.
namespace {

at::Tensor topk_reference(const at::Tensor& q64, const at::Tensor& k64, const at::Tensor& v64, const Grid& g,
                          int64_t rows, int64_t c, double keep, double* density) {
  const int64_t B = q64.size(0), H = q64.size(1), d = q64.size(3), L = g.L(), P = g.P();
  const int64_t bt = rows * g.W, per_frame = g.Hh / rows, nkb = g.F * per_frame;
  const int64_t own_max = std::min(c, g.F) * per_frame;
  const int64_t kk = std::min(nkb, std::max(own_max, static_cast<int64_t>(std::ceil(keep * nkb))));
  at::Tensor out = at::zeros_like(q64);
  const at::Tensor kb = k64.reshape({B, H, nkb, bt, d}).mean(3), vb = v64.reshape({B, H, nkb, bt, d}).mean(3);
  double pairs = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t f0 = 0; f0 < g.F; f0 += c) {
        const int64_t f1 = std::min(g.F, f0 + c);
        const at::Tensor qm = q64[b][h].narrow(0, f0 * P, (f1 - f0) * P).mean(0);
        std::vector<std::pair<double, int64_t>> sc;
        for (int64_t j = 0; j < nkb; ++j) {
          const bool own = j / per_frame >= f0 && j / per_frame < f1;
          sc.push_back({own ? 1e300 : at::dot(qm, kb[b][h][j]).item<double>(), j});
        }
        std::sort(sc.begin(), sc.end(), [](auto& x, auto& y) { return x.first > y.first; });
        std::vector<bool> chosen(nkb, false);
        for (int64_t i = 0; i < kk; ++i) chosen[sc[i].second] = true;
        for (int64_t t = f0 * P; t < f1 * P; ++t) {
          std::vector<double> logit;
          std::vector<at::Tensor> val;
          for (int64_t j = 0; j < nkb; ++j) {
            if (chosen[j]) {
              for (int64_t u = j * bt; u < (j + 1) * bt; ++u) {
                logit.push_back(at::dot(q64[b][h][t], k64[b][h][u]).item<double>() / std::sqrt(double(d)));
                val.push_back(v64[b][h][u]);
              }
            } else {
              logit.push_back(at::dot(q64[b][h][t], kb[b][h][j]).item<double>() / std::sqrt(double(d)) +
                              std::log(double(bt)));
              val.push_back(vb[b][h][j]);
            }
          }
          const double mx = *std::max_element(logit.begin(), logit.end());
          double den = 0;
          at::Tensor acc = at::zeros({d}, at::kDouble);
          for (size_t i = 0; i < logit.size(); ++i) {
            const double w = std::exp(logit[i] - mx);
            den += w;
            acc += w * val[i];
          }
          out[b][h][t] = acc / den;
          pairs += static_cast<double>(kk * bt + nkb);
        }
      }
  *density = pairs / (static_cast<double>(L) * L * B * H);
  return out;
}

void check_topk(const Grid& g, int64_t asked_rows, int64_t rows, int64_t c, double keep) {
  const int64_t B = 2, H = 3, d = 8;
  auto gen = at::detail::createCPUGenerator(11);
  const at::Tensor q = at::randn({B, H, g.L(), d}, gen), k = at::randn({B, H, g.L(), d}, gen),
                   v = at::randn({B, H, g.L(), d}, gen);
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "topk_blocks";
  o.of<SparseAttentionOptions>().key_block_rows = asked_rows;
  o.of<SparseAttentionOptions>().query_frames = c;
  o.of<SparseAttentionOptions>().keep_ratio = keep;
  Trace trace;
  ForwardContext fc;
  fc.options = &o;
  fc.trace = &trace;
  fc.grid_f = g.F, fc.grid_h = g.Hh, fc.grid_w = g.W;
  fc.layer = 5, fc.step = 10;
  ASSERT_TRUE(techniques::sparse_engaged(&fc));
  const at::Tensor out = techniques::sparse_self_attention(q, k, v, fc);
  double density = 0;
  const at::Tensor ref =
      topk_reference(q.to(at::kDouble), k.to(at::kDouble), v.to(at::kDouble), g, rows, c, keep, &density);
  EXPECT_LT((out.to(at::kDouble) - ref).abs().max().item<double>(), 2e-5);
  EXPECT_NEAR(trace.get("sparse.attention.density"), density, 1e-12);
  EXPECT_EQ(trace.get("sparse.attention.calls"), 1);
}

}  // namespace

TEST(SparseAttention, TopkBlocksMatchesItsDefinition) {
  check_topk({5, 4, 3}, 2, 2, 2, 0.5);   // 10 blocks of 6 tokens, chunks of 2 frames and a remainder
  check_topk({4, 3, 5}, 2, 1, 1, 0.25);  // 3 rows: blocks of one row (the largest divisor <= 2)
}

TEST(SparseAttention, TopkBlocksKeepingEveryBlockIsDenseAttention) {
  const Grid g{3, 4, 2};
  auto gen = at::detail::createCPUGenerator(3);
  const at::Tensor q = at::randn({2, 2, g.L(), 8}, gen), k = at::randn({2, 2, g.L(), 8}, gen),
                   v = at::randn({2, 2, g.L(), 8}, gen);
  RuntimeOptions o;
  o.of<SparseAttentionOptions>().pattern = "topk_blocks";
  o.of<SparseAttentionOptions>().keep_ratio = 1.0;
  Trace trace;
  ForwardContext fc;
  fc.options = &o;
  fc.trace = &trace;
  fc.grid_f = g.F, fc.grid_h = g.Hh, fc.grid_w = g.W;
  fc.layer = 5, fc.step = 10;
  const at::Tensor out = techniques::sparse_self_attention(q, k, v, fc);
  double density = 0;
  const at::Tensor ref = masked_attention(
      q, k, v, [](int64_t, int64_t, int64_t) { return true; }, &density);
  EXPECT_LT((out - ref).abs().max().item<double>(), 1e-5);
}
