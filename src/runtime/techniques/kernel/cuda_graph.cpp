// Kernel technique: CUDA-graph capture and replay of the transformer forward's body (see cuda_graph.h).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/cuda_graph_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(cuda_graph) {
  Technique t;
  t.name = "cuda_graph";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "the transformer forward's body captured once per shape, prompt and phase, then replayed (GPU builds)";
  t.flags = always_written(
      {bool_flag("cuda_graph", field(&CudaGraphOptions::on), "transformer forward captured and replayed")});
  t.switch_flag = "cuda_graph";
  t.hooks = {"transformer.body"};
  t.engagement = {{"kernel.cuda_graph.replays", "cuda_graph is on but no graph was replayed"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"cuda_graph", {{"cuda_graph", true}}}} : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/kernel/cuda_graph.h"

#include <map>

#include "base/error.h"
#include "runtime/trace.h"

#ifdef AUTOOPTIM_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/techniques/kernel/graph_capture.h"
#endif

namespace autooptim::runtime::techniques {

struct CudaGraphs::Impl {
  struct Entry {
    int64_t calls = 0;
    std::vector<at::Tensor> static_in;
    at::Tensor static_out;
    Trace counts;  // what one run of the body counts
#ifdef AUTOOPTIM_WITH_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  };
  std::map<std::string, Entry> entries;
#ifdef AUTOOPTIM_WITH_CUDA
  bool have_pool = false;
  decltype(at::cuda::graph_pool_handle()) pool{
      0, 0};  // one private pool for all graphs of a generation: they never run at once
#endif
};

CudaGraphs::CudaGraphs() : impl_(std::make_unique<Impl>()) {}

CudaGraphs::~CudaGraphs() {
#ifdef AUTOOPTIM_WITH_CUDA
  // Graphs are destroyed before their static buffers and pool memory; wait for pending replays first.
  if (!impl_->entries.empty()) cudaDeviceSynchronize();
#endif
}

bool CudaGraphs::available(const at::Tensor& t) {
#ifdef AUTOOPTIM_WITH_CUDA
  return t.is_cuda();
#else
  (void)t;
  return false;
#endif
}

at::Tensor CudaGraphs::run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                           const Body& body) {
  ForwardContext local = fc;
  if (inputs.empty() || !available(inputs.front())) return body(inputs, local);
  auto& e = impl_->entries[key];
  if (e.calls++ == 0) {
    fc.count("kernel.cuda_graph.eager_runs");
    return body(inputs, local);
  }
#ifdef AUTOOPTIM_WITH_CUDA
  if (!e.graph) {
    // Capture after everything queued so far (graph_capture.h: on a side stream).
    for (const auto& t : inputs) e.static_in.push_back(t.clone());
    local.trace = fc.trace ? &e.counts : nullptr;
    if (!impl_->have_pool) {
      impl_->pool = at::cuda::graph_pool_handle();
      impl_->have_pool = true;
    }
    cudaDeviceSynchronize();
    try {
      e.graph =
          capture_graph(inputs.front().device().index(), impl_->pool, [&] { e.static_out = body(e.static_in, local); });
    } catch (const std::exception& ex) {
      impl_->entries.erase(key);
      throw Error(std::string("cuda_graph: the transformer forward could not be captured: ") + ex.what());
    }
    cudaDeviceSynchronize();
    fc.count("kernel.cuda_graph.captures");
  } else {
    if (e.static_in.size() != inputs.size()) throw Error("cuda_graph: input count changed for key " + key);
    for (size_t i = 0; i < inputs.size(); ++i) e.static_in[i].copy_(inputs[i]);
  }
  e.graph->replay();
  if (fc.trace) fc.trace->merge(e.counts);
  fc.count("kernel.cuda_graph.replays");
  return e.static_out.clone();
#else
  return body(inputs, local);
#endif
}

AUTOOPTIM_EXTENSIONS(cuda_graph) {
  points.forward_replay.add({"cuda_graph", 10, [](const RuntimeOptions& o) { return o.of<CudaGraphOptions>().on; },
                             [] { return std::make_unique<CudaGraphs>(); }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
