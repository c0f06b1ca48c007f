#pragma once
// The runtime's typed options: every acceleration technique is one switch here, off by default.
// The technique registry (techniques/registry.h) binds each manifest flag to its field here; the forward
// reads the fields directly. A default-constructed RuntimeOptions is the baseline.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace autooptim::runtime {

struct EasyCacheOptions {
  bool enabled = false;
  double threshold = 0.05;    // accumulated relative-change budget before a full forward (0, 1]
  int64_t warmup_steps = 10;  // first steps always computed in full
  bool dense_last_step = true;
  // 0: a skipped step reuses the branch's last residual; 1: extrapolates it linearly from the branch's
  // last two full computations (TaylorSeer's first-order forecast, Liu et al. 2025).
  int64_t order = 0;
};

// TeaCache-style block cache: the first block's modulated input changes by a relative L1 amount each
// step; a fitted polynomial rescales it into an estimate of the output's change; while the accumulated
// estimate stays under the threshold the block stack is skipped (its cached residual reused). Per CFG
// branch.
struct TeaCacheOptions {
  bool enabled = false;
  double threshold = 0.1;
  int64_t warmup_steps = 5;
  bool dense_last_step = true;
  // Polynomial, lowest order first: estimate = c0 + c1 x + c2 x^2 ...; [0, 1] is the identity (uncalibrated).
  std::vector<double> coefficients{0.0, 1.0};
  bool calibrate = false;  // compute every step and record (input change, output change) pairs
};

// MagCache-style block cache: a magnitude-ratio schedule (|residual_t| / |residual_t-1| per step, per
// branch), calibrated once; skipping accumulates the error |1 - product of ratios| and stops at the
// threshold or after max_skips consecutive skips.
struct MagCacheOptions {
  bool enabled = false;
  double threshold = 0.12;
  int64_t max_skips = 2;
  int64_t warmup_steps = 10;
  bool dense_last_step = true;
  std::vector<double> ratios;         // conditional branch, one per calibrated step
  std::vector<double> ratios_uncond;  // unconditional branch (empty: the conditional schedule)
  bool calibrate = false;             // compute every step and record the ratios
};

// First-block cache: block 0 always runs; when its residual changed by less than the threshold (relative
// L1 against the last full computation of the branch), blocks 1..N-1 reuse their cached residual.
struct FirstBlockCacheOptions {
  bool enabled = false;
  double threshold = 0.05;
  int64_t warmup_steps = 1;
  bool dense_last_step = true;
};

// TaylorSeer-style fixed schedule: after the warm-up a full forward every `interval` steps, and in between
// each CFG branch forecasts its residual (output - input) from its last full computations by a Taylor
// series in the step index (Liu et al., ICCV 2025). It skips the same steps on any model.
struct TaylorSeerOptions {
  bool enabled = false;
  int64_t interval = 3;      // a full computation every `interval` steps after the warm-up
  int64_t order = 1;         // 0: reuse the last residual; 1: linear from the last two; 2: quadratic from three
  int64_t warmup_steps = 5;  // first steps always computed in full
  bool dense_last_step = true;
};

// A forced skip schedule, for benchmarking the speed of a cache at a given skip ratio: at the listed
// steps every branch reuses its last residual instead of running the transformer.
struct ForcedSkipOptions {
  std::vector<int64_t> steps;
};

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

// Quantisation family (lossy: judged by the quality gate like a cache).
struct QuantOptions {
  bool fp8 = false;  // FP8 e4m3 GEMMs for the transformer's large linears (GPU builds, sm_89+)
};

struct RuntimeOptions {
  std::string dtype = "bf16";  // "bf16" | "fp32" | "fp64": the transformer's compute dtype (see
                               // compute_dtype: the CPU runs bf16 manifests in fp32)
  int64_t cpu_threads = 0;     // 0 = libtorch's own setting (OMP_NUM_THREADS, else its default)
  bool onednn = true;          // oneDNN (MKL-DNN) CPU kernels where libtorch would pick them
  // kernel family
  std::string attention_backend = "auto";  // auto | math | flash | efficient | cudnn (what the build has)
  bool fused_qkv = false;                  // q/k/v weights merged at load into one GEMM
  bool cross_kv_cache = false;             // cross-attention K/V computed once per prompt, reused across steps
  bool timestep_dedup = false;             // time embedding computed once per distinct timestep value
  bool uniform_timestep = false;           // a per-token timestep with one value per sample handled per sample
  bool rope_cache = false;                 // rotary tables kept on the device per latent grid
  bool text_trim = false;                  // the text encoder runs over the prompt's own tokens, not all 512
  bool cuda_graph = false;                 // transformer forward captured and replayed (GPU builds)
  bool fused_norm_modulate = false;        // LayerNorm + adaLN shift/scale in one CUDA pass
  bool fused_gate_residual = false;        // gate multiply + residual add in one CUDA pass
  bool fused_qk_norm_rope = false;         // q/k RMSNorm + RoPE in one in-place CUDA pass
  bool gelu_epilogue = false;              // FFN GELU-tanh in the GEMM's cuBLASLt epilogue
  bool fused_cross_norm = false;           // norm2 and the cross residual add + FFN norm/modulation in CUDA passes
  bool gemm_autotune = false;              // the fastest of cuBLASLt's candidate algorithms per GEMM shape
  int64_t hopper_attention = 0;            // our sm_90a attention kernel for head_dim 128 (0: off; 1-6: its variant)
  // kernel family, the VAE decoder (techniques/vae/)
  bool vae_bf16 = false;                 // decode with a bf16 copy of the VAE (statistics stay float32)
  bool vae_channels_last = false;        // decode in channels_last_3d (NDHWC), the layout cuDNN's convs want
  bool vae_fused_norm_silu = false;      // RMS norm + SiLU in one CUDA pass, written into the conv's input
  bool vae_causal_buffer = false;        // causal convs keep [context, chunk] in one buffer: no concatenation
  int64_t vae_causal_ring = 0;           // chunks the causal buffer holds (0: one, the context copied each chunk)
  bool vae_subpixel_upsample = false;    // nearest 2x + 3x3 conv as four 2x2 convs on the small frame
  bool vae_fused_shortcut = false;       // the up blocks' DupUp3D shortcut added in place in one CUDA pass
  bool vae_cudnn_benchmark = false;      // cuDNN times its conv algorithms per shape during the decode
  bool vae_frame_convs = false;          // one-frame convs as 2D convs over the frames (channels-last view)
  int64_t vae_chunk_frames = 1;          // latent frames per decoder chunk after the first (the reference: 1)
  bool vae_transposed_upsample = false;  // nearest 2x + 3x3 conv as one stride-2 4x4 transposed conv
  int64_t vae_head_pad = 0;              // output channels the decoder's last conv is padded to (0: off)
  bool vae_pointwise_gemm = false;       // 1x1x1 convs as one GEMM over the voxels (channels-last view)
  bool vae_cuda_graph = false;           // steady decoder chunks captured once per chunk length, then replayed
  // quantisation family
  QuantOptions quant;
  // cache family (one policy at a time)
  EasyCacheOptions easycache;
  TeaCacheOptions teacache;
  MagCacheOptions magcache;
  FirstBlockCacheOptions first_block_cache;
  TaylorSeerOptions taylorseer;
  ForcedSkipOptions forced_skip;
  // sparse-attention family
  SparseAttentionOptions sparse;
};

}  // namespace autooptim::runtime
