#pragma once
// Sparse-attention technique: training-free patterns for the video tokens of self-attention, run
// through dense attention on regrouped tokens (no custom kernel):
// - spatial_temporal: half the heads attend within their frame (tokens grouped per frame), the other
//   half across frames at the same spatial position (grouped per position), as in Sparse VideoGen's
//   spatial and temporal heads.
// - tile_window: tokens attend within 3D tiles of 2*window_frames+1 latent frames (the last tile
//   shorter when that does not divide the frames) and, when window_tiles > 0 and 2*window_tiles+1
//   divides the latent height and width, (2*window_tiles+1)^2 spatial positions (block-diagonal).
// - frame_window: a sliding window over latent frames: chunks of query_frames frames attend to the
//   frames within window_frames of the chunk (contiguous token ranges: one fused attention call per
//   chunk on views, no mask and no regrouping copies).
// - topk_blocks (PISA / Sparse VideoGen 2 style): per chunk of query_frames frames and per head, exact
//   attention to the key blocks (key_block_rows latent rows of a frame) whose mean key scores highest
//   against the chunk's mean query (keep_ratio of them, the chunk's own frames always), and every other
//   block as one pooled key (mean key, logit + log(block size)) with its mean value, in the same softmax:
//   one fused attention call per chunk on the gathered blocks, merged with the pooled part through its
//   log-sum-exp.
// The first dense_layers blocks and the first dense_steps steps stay dense. Counts
// sparse.attention.calls, .dense_calls, .pairs_attended, .pairs_total and the achieved .density.
#include <ATen/ATen.h>

#include "runtime/techniques/sparse/video_sparse_attention_options.h"
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// True when this forward's step is past the pattern's dense steps (its later layers go sparse).
bool sparse_step(const ForwardContext* fc);

// True when this self-attention call should use the sparse pattern.
bool sparse_engaged(const ForwardContext* fc);

// q, k, v [B, heads, L, d] with L = grid_f * grid_h * grid_w (f-major) -> [B, heads, L, d].
at::Tensor sparse_self_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const ForwardContext& fc);

// Counts a dense self-attention call (for the achieved density).
void count_dense_attention(const at::Tensor& q, const ForwardContext* fc);

}  // namespace autooptim::runtime::techniques
