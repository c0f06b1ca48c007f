#pragma once
// What one transformer forward needs to know beyond its inputs: the technique switches, where to count
// engagement, per-generation caches, and where in the denoising loop it is. The model code calls the
// techniques' hooks through this; a null context is the baseline.
#include <ATen/ATen.h>

#include <map>
#include <utility>

#include "runtime/options.h"
#include "runtime/trace.h"

namespace autooptim::runtime {
namespace techniques {
class CudaGraphs;
}

// Cross-attention keys and values of each block for one prompt embedding, reused across the steps of
// one generation (never across generations: the cache lives in the generation's context).
struct CrossKVCache {
  // (block index, embedding storage pointer) -> (k, v) after norm_k, [B, S, D]
  std::map<std::pair<int64_t, const void*>, std::pair<at::Tensor, at::Tensor>> entries;
};

struct ForwardContext {
  const RuntimeOptions* options = nullptr;
  Trace* trace = nullptr;
  CrossKVCache* cross_kv = nullptr;
  techniques::CudaGraphs* cuda_graphs = nullptr;  // per-generation captured forwards (cuda_graph switch)
  int64_t step = 0;   // denoising step of this forward
  int64_t steps = 0;  // steps of the generation
  // Latent grid after patching, for attention patterns that regroup tokens: frames, height, width.
  int64_t grid_f = 0, grid_h = 0, grid_w = 0;
  int64_t layer = 0;  // block index of the attention being run

  void count(const char* key, double v = 1.0) const {
    if (trace) trace->add(key, v);
  }
};

}  // namespace autooptim::runtime
