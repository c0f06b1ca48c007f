#pragma once
// The options of the sparse technique (video_sparse_attention.cpp), held in RuntimeOptions by type
// (RuntimeOptions::of). Torch-free: the registry library binds its flags to them.
#include <cstdint>
#include <string>

namespace autooptim::runtime {

struct SparseAttentionOptions {
  // "none" | "spatial_temporal" (heads split: within-frame and across-frames groups)
  // | "tile_window" (3D sliding window over tiles of tokens)
  // | "frame_window" (sliding window of latent frames, chunked queries)
  std::string pattern = "none";
  int64_t window_frames = 1;  // tile_window: half-width in latent frames
  int64_t window_tiles = 1;   // tile_window: half-width in spatial tiles
  int64_t dense_layers = 1;   // first layers kept dense
  int64_t dense_steps = 5;    // first steps kept dense
  int64_t query_frames = 1;   // frame_window, topk_blocks: latent frames per query chunk
  // topk_blocks (PISA / Sparse VideoGen 2 style): each query chunk attends exactly to the key blocks
  // (key_block_rows latent rows of one frame) whose mean key scores highest against the chunk's mean
  // query, per head, plus its own frames; every other block is stood for by its mean key and value.
  double keep_ratio = 0.25;    // share of the key blocks attended exactly
  int64_t key_block_rows = 2;  // rows of a latent frame (after patching) per key block
};

}  // namespace autooptim::runtime
