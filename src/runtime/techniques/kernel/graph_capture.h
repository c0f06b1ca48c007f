#pragma once
// CUDA builds only (include under AUTOOPTIM_WITH_CUDA): the capture that cuda_graph (the transformer
// forward) and vae_cuda_graph (the VAE decoder's chunks) share.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>
#include <memory>

namespace autooptim::runtime::techniques {

// What body() launches, captured into a new graph that draws its memory from `pool`. The capture runs on
// a side stream of `device` (libtorch refuses to capture the default stream); nothing executes while
// capturing, and a replay later runs on the caller's stream. A body that throws ends the capture before
// the exception goes on.
inline std::unique_ptr<at::cuda::CUDAGraph> capture_graph(c10::DeviceIndex device,
                                                          decltype(at::cuda::graph_pool_handle()) pool,
                                                          const std::function<void()>& body) {
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  // A graph's memory comes from its private pool, which cannot take the blocks the caching allocator keeps
  // for eager work: at the full TI2V-5B shape on an 80 GB H100 the gate's generations left 26 GB cached and
  // the capture ran out of memory with 1.3 GB free (GateGpu, 2026-12-06). Hand the cached blocks back first;
  // a capture happens once per shape per generation, so the resynchronisation costs nothing steady.
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool(false, device));
  graph->capture_begin(pool);
  try {
    body();
  } catch (...) {
    try {
      graph->capture_end();
    } catch (...) {
    }
    throw;
  }
  graph->capture_end();
  return graph;
}

}  // namespace autooptim::runtime::techniques
