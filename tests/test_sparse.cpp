// The sparse-attention patterns against dense attention with an explicit mask of the pairs each
// pattern claims to attend: same outputs (float32), and the counted density equals the mask's.
#include <gtest/gtest.h>

#include <functional>

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
  const at::Tensor q = at::randn({B, H, g.L(), d}, gen), k = at::randn({B, H, g.L(), d}, gen), v = at::randn({B, H, g.L(), d}, gen);
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
  o.sparse.pattern = "spatial_temporal";
  const Grid g{3, 2, 3};
  // Heads 0-1 within their frame, heads 2-3 across frames at the same position.
  check(o, g, [&](int64_t h, int64_t i, int64_t j) { return h < 2 ? g.f(i) == g.f(j) : g.y(i) == g.y(j) && g.x(i) == g.x(j); });
}

TEST(SparseAttention, TileWindowWithARemainderTileMatchesItsMask) {
  // 7 latent frames in tiles of 3: frames {0,1,2}, {3,4,5} and the remainder {6}; spatial axes whole.
  RuntimeOptions o;
  o.sparse.pattern = "tile_window";
  o.sparse.window_frames = 1;
  o.sparse.window_tiles = 0;
  const Grid g{7, 2, 2};
  auto tile = [](int64_t f) { return f < 6 ? f / 3 : 2; };
  check(o, g, [&](int64_t, int64_t i, int64_t j) { return tile(g.f(i)) == tile(g.f(j)); });
}

TEST(SparseAttention, TileWindowInFramesAndSpaceMatchesItsMask) {
  // 5 frames in tiles of 3 (remainder of 2) and a 6x3 grid in 3x3 spatial tiles.
  RuntimeOptions o;
  o.sparse.pattern = "tile_window";
  o.sparse.window_frames = 1;
  o.sparse.window_tiles = 1;
  const Grid g{5, 6, 3};
  auto tile = [&](int64_t t) { return std::make_tuple(g.f(t) < 3 ? 0 : 1, g.y(t) / 3, g.x(t) / 3); };
  check(o, g, [&](int64_t, int64_t i, int64_t j) { return tile(i) == tile(j); });
}

TEST(SparseAttention, FrameWindowMatchesItsMask) {
  // 7 frames, queries one frame at a time, keys within 2 frames: a sliding window clipped at the ends.
  RuntimeOptions o;
  o.sparse.pattern = "frame_window";
  o.sparse.window_frames = 2;
  const Grid g{7, 2, 3};
  check(o, g, [&](int64_t, int64_t i, int64_t j) { return std::abs(g.f(i) - g.f(j)) <= 2; });
}

TEST(SparseAttention, FrameWindowWithQueryChunksAndARemainderMatchesItsMask) {
  // 7 frames in query chunks of 3 ({0,1,2}, {3,4,5}, {6}); each chunk sees 1 frame beyond either end.
  RuntimeOptions o;
  o.sparse.pattern = "frame_window";
  o.sparse.window_frames = 1;
  o.sparse.query_frames = 3;
  const Grid g{7, 3, 1};
  check(o, g, [&](int64_t, int64_t i, int64_t j) {
    const int64_t f0 = g.f(i) / 3 * 3, f1 = std::min<int64_t>(7, f0 + 3);
    return g.f(j) >= f0 - 1 && g.f(j) < f1 + 1;
  });
}
