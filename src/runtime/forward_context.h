#pragma once
// What one transformer forward needs to know beyond its inputs: the technique switches, where to count
// engagement, per-generation caches, and where in the denoising loop it is. The model calls the extension
// points (runtime/extension_points.h) with this; a null context is the baseline.
#include <ATen/ATen.h>

#include <map>
#include <utility>

#include "runtime/options.h"
#include "runtime/trace.h"

namespace autooptim::runtime {
class ForwardReplay;
class StepCache;
namespace ext {
struct TransformerPoints;
}

// Values that depend only on the prompt, kept for one generation (the cross_kv_cache technique fills it).
struct CrossKVCache {
  // (block index, embedding storage pointer) -> (k, v) after norm_k, [B, S, D]; block -1 holds the
  // projected text [B, S, D] (and an undefined tensor).
  std::map<std::pair<int64_t, const void*>, std::pair<at::Tensor, at::Tensor>> entries;
};

// Work the model code did, counted by the model code itself (not by a technique): what the gate's work
// floors and counter cross-checks read (docs/gate-defences.md). Per denoising step, reset by the loop.
struct WorkCount {
  int64_t blocks = 0;                 // transformer blocks run (a block cache that reuses a residual runs fewer)
  int64_t sparse_self_attention = 0;  // self-attention calls that took the sparse path
};

struct ForwardContext {
  const RuntimeOptions* options = nullptr;
  WorkCount* work = nullptr;  // the loop's counts of this step (null: not counted)
  Trace* trace = nullptr;
  CrossKVCache* cross_kv = nullptr;
  ForwardReplay* replay = nullptr;  // per-generation replay of the forward's body (ext::make_forward_replay)
  StepCache* cache = nullptr;       // the generation's step-cache policy (cache family), if any
  // The overrides on for this forward, resolved once by the transformer's forward (null: resolved there).
  const ext::TransformerPoints* points = nullptr;
  int64_t step = 0;   // denoising step of this forward
  int branch = 0;     // CFG branch of this forward: 0 conditional, 1 unconditional
  int64_t steps = 0;  // steps of the generation
  // Latent grid after patching, for attention patterns that regroup tokens: frames, height, width.
  int64_t grid_f = 0, grid_h = 0, grid_w = 0;
  int64_t layer = 0;  // block index of the attention being run

  void count(const char* key, double v = 1.0) const {
    if (trace) trace->add(key, v);
  }
};

}  // namespace autooptim::runtime
