#pragma once
// Kernel technique: CUDA-graph capture of the transformer forward. The forward's body (patch
// embedding, the blocks, the head) is captured once per distinct shape, prompt and attention phase of a
// generation and replayed for the later steps, so its ~1,000 kernels per forward launch as one graph
// instead of one by one from the CPU. The parts that need the CPU between kernels (the time embedding
// with timestep_dedup, the cross-attention cache lookup, the rotary tables) stay eager and feed the
// graph through static input buffers.
//
// Per key: the first call runs eagerly (it also warms the caches the graph then reads: merged QKV
// weights, cached cross-attention K/V); the second captures on a side stream and replays; later calls
// copy their inputs into the static buffers and replay. Each replay adds the engagement counters the
// captured body counted once, so other techniques' counts stay true. Counts kernel.cuda_graph.captures,
// .replays and .eager_runs. On a build or device without CUDA the body runs eagerly every time and
// nothing is replayed (the harness's engagement check then rejects the switch).
#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/techniques/kernel/cuda_graph_options.h"
#include "runtime/extension_points.h"  // ForwardReplay
#include "runtime/forward_context.h"

namespace autooptim::runtime::techniques {

// Made at pipeline.forward_replay for a generation (ForwardContext::replay).
class CudaGraphs : public ForwardReplay {
 public:
  using Body = ForwardBody;

  CudaGraphs();
  ~CudaGraphs() override;
  CudaGraphs(const CudaGraphs&) = delete;
  CudaGraphs& operator=(const CudaGraphs&) = delete;

  // True where a graph can be captured for tensors like `t`: a CUDA build and a CUDA tensor.
  static bool available(const at::Tensor& t);

  // body(inputs, fc) for `key`, eagerly or from its graph (see above). The result is a fresh tensor
  // that later replays do not overwrite.
  at::Tensor run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                 const Body& body) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace autooptim::runtime::techniques
