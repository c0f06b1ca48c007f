#pragma once
// FLOP counts (2 x multiply-adds) of the model's stages, for the efficiency figures and the physical
// floor below which a measured time is impossible.
#include <cstdint>

#include "runtime/wan_transformer.h"

namespace autooptim::runtime {

struct TransformerFlops {
  double linear = 0;     // every GEMM of the blocks, embedders and head
  double attention = 0;  // QK^T and PV of self- and cross-attention
  double time_embedding = 0;
  double total() const { return linear + attention + time_embedding; }
};

// One forward over a latent of [frames, height, width] (latent units) with `text_tokens` keys in
// cross-attention; per_token_time counts the per-token time embedding the reference computes.
inline TransformerFlops transformer_flops(const WanTransformerConfig& c, int64_t batch, int64_t frames, int64_t height,
                                          int64_t width, int64_t text_tokens, bool per_token_time = true) {
  const double D = static_cast<double>(c.dim()), Fd = static_cast<double>(c.ffn_dim);
  const double L =
      static_cast<double>(frames / c.patch_size[0] * (height / c.patch_size[1]) * (width / c.patch_size[2]));
  const double S = static_cast<double>(text_tokens), B = static_cast<double>(batch);
  const double patch = static_cast<double>(c.patch_size[0] * c.patch_size[1] * c.patch_size[2]);
  TransformerFlops f;
  const double per_block_linear = 2 * L * D * D * 4      // self q k v o
                                  + 2 * L * D * D * 2    // cross q o
                                  + 2 * S * D * D * 2    // cross k v
                                  + 2 * L * D * Fd * 2;  // ffn
  const double per_block_attn = 4 * L * L * D + 4 * L * S * D;
  f.linear = B * (c.num_layers * per_block_linear + 2 * L * D * c.in_channels * patch  // patch embedding
                  + 2 * L * D * c.out_channels * patch                                 // proj_out
                  + 2 * S * D * (c.text_dim + D));                                     // text embedder
  f.attention = B * c.num_layers * per_block_attn;
  const double rows = per_token_time ? L : 1.0;
  f.time_embedding = B * rows * 2 * (c.freq_dim * D + D * D + D * 6 * D);
  return f;
}

}  // namespace autooptim::runtime
