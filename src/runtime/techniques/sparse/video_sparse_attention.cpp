#include "runtime/techniques/sparse/video_sparse_attention.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/techniques/kernel/attention_backend.h"

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

}  // namespace

bool sparse_step(const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->sparse.pattern == "none") return false;
  return fc->step >= fc->options->sparse.dense_steps;
}

bool sparse_engaged(const ForwardContext* fc) {
  return sparse_step(fc) && fc->layer >= fc->options->sparse.dense_layers && fc->grid_f > 0;
}

void count_dense_attention(const at::Tensor& q, const ForwardContext* fc) {
  if (!fc || !fc->options || fc->options->sparse.pattern == "none") return;
  const double L = static_cast<double>(q.size(2));
  record(*fc, L * L * q.size(0) * q.size(1), L * L * q.size(0) * q.size(1), false);
}

at::Tensor sparse_self_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext& fc) {
  const auto& s = fc.options->sparse;
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3);
  const int64_t F = fc.grid_f, Hh = fc.grid_h, W = fc.grid_w, P = Hh * W;
  if (F * P != L) throw Error("sparse attention: token count does not match the latent grid");
  const double total = static_cast<double>(L) * L * B * H;
  if (s.pattern == "spatial_temporal") {
    const int64_t hs = H / 2, ht = H - hs;  // spatial heads first, temporal heads after
    auto spatial = [&](const at::Tensor& x) {  // [B, hs, F*P, d] -> [B*F, hs, P, d]
      return x.slice(1, 0, hs).reshape({B, hs, F, P, d}).permute({0, 2, 1, 3, 4}).reshape({B * F, hs, P, d});
    };
    auto temporal = [&](const at::Tensor& x) {  // [B, ht, F*P, d] -> [B*P, ht, F, d]
      return x.slice(1, hs, H).reshape({B, ht, F, P, d}).permute({0, 3, 1, 2, 4}).reshape({B * P, ht, F, d});
    };
    const at::Tensor os = attention(spatial(q), spatial(k), spatial(v), &fc)
                              .reshape({B, F, hs, P, d}).permute({0, 2, 1, 3, 4}).reshape({B, hs, L, d});
    const at::Tensor ot = attention(temporal(q), temporal(k), temporal(v), &fc)
                              .reshape({B, P, ht, F, d}).permute({0, 2, 3, 1, 4}).reshape({B, ht, L, d});
    const double attended = static_cast<double>(B) * (hs * F * static_cast<double>(P) * P + ht * P * static_cast<double>(F) * F);
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
      return o.reshape({B, nf, nh, nw, H, tfr, th, tw, d}).permute({0, 4, 1, 5, 2, 6, 3, 7, 8}).reshape({B, H, frames * P, d});
    };
    at::Tensor o = tiled(q.slice(2, 0, main_f * P), k.slice(2, 0, main_f * P), v.slice(2, 0, main_f * P), main_f, tf);
    if (rest_f > 0)
      o = at::cat({o, tiled(q.slice(2, main_f * P), k.slice(2, main_f * P), v.slice(2, main_f * P), rest_f, rest_f)}, 2);
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
  throw Error("sparse attention: unknown pattern '" + s.pattern + "'");
}

}  // namespace autooptim::runtime::techniques
