// Kernel technique (VAE decoder): CUDA graphs per chunk shape. The decoder runs one chunk per latent frame
// (or vae_chunk_frames of them); after the first two chunks every chunk has the same shapes and leaves the
// causal caches where it found them, so the third is captured once as a graph and every later chunk of
// that length is replayed: ~300 kernels per chunk launched as one graph instead of one by one from the
// CPU. Chunk 0 (one frame, the temporal upsamplers skipped) and chunk 1 (the caches take their steady
// shapes, cuDNN picks its algorithms) run eagerly; so does a last chunk of another length. With
// vae_causal_ring the causal buffers' windows move with the chunk, so there is one graph per ring
// position. The context the causal convs keep is copied into the cache's own tensors (not into fresh
// ones), and the capture checks that no cache tensor moved, so a replay reads and writes the memory the
// next chunk reads. The replay runs the captured kernels on the same values: the output is the eager
// decode's, bit for bit (tests/runtime/test_gpu_kernels.cpp checks it).
//
// The gain is bounded by the launch overhead: the kernel-vae decode at TI2V-5B's shape is GPU-bound, so
// the replay measured within the noise of the eager decode, at a little less peak memory
// (docs/journal/2026-12-05.md, seventh session).
// Counted: kernel.vae_cuda_graph.captures, .replays, .eager_chunks. Under `bench --profile` (a profiler
// records events between the kernels) the decode runs eagerly.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_cuda_graph_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_cuda_graph) {
  Technique t;
  t.name = "vae_cuda_graph";
  t.family = "kernel";
  t.lossless = true;  // the captured kernels on the same values (tests/runtime/test_gpu_kernels.cpp: bit-identical)
  t.summary =
      "VAE decoder chunks of one shape captured once as a CUDA graph per chunk length, then replayed (GPU builds)";
  t.flags = {
      bool_flag("vae_cuda_graph", field(&VaeCudaGraphOptions::on), "VAE decoder chunks replayed from CUDA graphs")};
  t.switch_flag = "vae_cuda_graph";
  t.hooks = {"vae.decode_chunks"};
  t.engagement = {{"kernel.vae_cuda_graph.replays",
                   "vae_cuda_graph is on but no decoder chunk was replayed from a graph (it needs a CUDA build, the "
                   "VAE on the GPU, at least three latent frames and no profiler)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_cuda_graph", {{"vae_cuda_graph", true}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include <map>
#include <utility>

#include "base/error.h"
#include "runtime/profile.h"
#include "runtime/techniques/vae/vae_ops.h"
#include "runtime/wan_vae.h"

#ifdef AUTOOPTIM_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/techniques/kernel/graph_capture.h"
#endif

namespace autooptim::runtime::techniques {

#ifdef AUTOOPTIM_WITH_CUDA
namespace {

// What a chunk must leave unchanged for its graph to be replayed for the next one: each cache slot's
// tensor (its memory and shape) and its "Rep" mark. The ring positions move (one graph per position).
struct CacheShape {
  std::vector<std::pair<const void*, std::vector<int64_t>>> tensors;
  std::vector<bool> rep;
  bool operator==(const CacheShape& o) const { return tensors == o.tensors && rep == o.rep; }
};

CacheShape cache_shape(const WanCausalCache& cache) {
  CacheShape s;
  for (const auto& slot : cache.slots) {
    s.tensors.emplace_back(slot.frames.defined() ? slot.frames.data_ptr() : nullptr,
                           slot.frames.defined() ? slot.frames.sizes().vec() : std::vector<int64_t>{});
    s.rep.push_back(slot.rep);
  }
  return s;
}

}  // namespace
#endif

struct VaeChunkGraphs::Impl {
  struct Entry {
    at::Tensor static_in, static_out;
    Trace counts;  // what one chunk counts (the capture's body), added again at every replay
#ifdef AUTOOPTIM_WITH_CUDA
    std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  };
  const VaeRun* run = nullptr;
  bool on = false;
  int64_t previous_n = 0;                                // the previous chunk's latent frames (0: none yet)
  std::map<std::pair<int64_t, int64_t>, Entry> entries;  // by (latent frames, ring position)
#ifdef AUTOOPTIM_WITH_CUDA
  bool have_pool = false;
  decltype(at::cuda::graph_pool_handle()) pool{0, 0};  // one private pool: the graphs never run at once
#endif
};

VaeChunkGraphs::VaeChunkGraphs(const VaeRun* run) : impl_(std::make_unique<Impl>()) {
  impl_->run = run;
  impl_->on = run && run->options && run->options->of<VaeCudaGraphOptions>().on;
}

VaeChunkGraphs::~VaeChunkGraphs() {
#ifdef AUTOOPTIM_WITH_CUDA
  // The pool's memory goes back when the graphs go: let the last replays finish reading and writing it.
  if (!impl_->entries.empty()) cudaDeviceSynchronize();
#endif
}

bool VaeChunkGraphs::engaged() const { return impl_->on; }

at::Tensor VaeChunkGraphs::chunk(int64_t k, const at::Tensor& in, WanCausalCache& cache, const Body& body) {
  auto& s = *impl_;
  const int64_t n = in.size(2);
  // Steady: not one of the first two chunks, and as long as the one before (the caches have this length's
  // shapes). A profiler records events between the kernels: eager then.
  const bool steady = s.on && k >= 2 && n == s.previous_n && in.is_cuda() && !Profiler::current();
  s.previous_n = n;
#ifdef AUTOOPTIM_WITH_CUDA
  if (steady) {
    const int64_t ring = vae_causal_ring(s.run, in.size(0));
    auto& e = s.entries[{n, k % ring}];
    if (!e.graph) {
      const CacheShape before = cache_shape(cache);
      // The chunk's layout exactly (a frame range of the latents: strided where the batch is above one).
      e.static_in = at::empty_strided(in.sizes(), in.strides(), in.options());
      e.static_in.copy_(in);
      if (!s.have_pool) {
        s.pool = at::cuda::graph_pool_handle();
        s.have_pool = true;
      }
      // The body counts into the entry (once), through a run that differs from the decode's in that only.
      // Nothing is launched while capturing, so the queued chunks keep running; the replay goes on the
      // decode's stream after them.
      VaeRun counting{s.run->options, s.run->trace ? &e.counts : nullptr};
      struct RestoreRun {
        WanCausalCache& cache;
        const VaeRun* run;
        ~RestoreRun() { cache.run = run; }
      } restore{cache, cache.run};
      cache.run = &counting;
      try {
        e.graph = capture_graph(in.device().index(), s.pool, [&] { e.static_out = body(e.static_in); });
        if (!(cache_shape(cache) == before))
          throw Error("the captured chunk moved a causal cache tensor, so its graph cannot be replayed");
      } catch (const std::exception& ex) {
        s.entries.erase({n, k % ring});
        throw Error(std::string("vae_cuda_graph: a decoder chunk could not be captured: ") + ex.what());
      }
      s.run->count("kernel.vae_cuda_graph.captures");
    } else {
      e.static_in.copy_(in);
    }
    e.graph->replay();
    if (s.run->trace) s.run->trace->merge(e.counts);
    s.run->count("kernel.vae_cuda_graph.replays");
    return e.static_out;
  }
#else
  (void)steady;
  (void)cache;
#endif
  if (s.on) s.run->count("kernel.vae_cuda_graph.eager_chunks");
  return body(in);
}

// The chunk runner, and the context kept in place: the copy goes into the slot's own tensor where it has
// the shape already, so a chunk leaves the cache's memory where it found it (a graph replayed for the
// next chunk reads it there).
AUTOOPTIM_EXTENSIONS(vae_cuda_graph) {
  const auto on = [](const RuntimeOptions& o) { return o.of<VaeCudaGraphOptions>().on; };
  points.vae_chunk_runner.add({"vae_cuda_graph", 10, on, [](const VaeRun& run) -> std::unique_ptr<ext::VaeChunkRunner> {
                                 return std::make_unique<VaeChunkGraphs>(&run);
                               }});
  points.vae_keep_context.add(
      {"vae_cuda_graph", 10, on,
       [](at::Tensor& frames, const at::Tensor& keep, const VaeRun&) -> std::optional<ext::Done> {
         if (!(frames.defined() && frames.sizes() == keep.sizes() && frames.scalar_type() == keep.scalar_type() &&
               frames.device() == keep.device()))
           return std::nullopt;
         frames.copy_(keep);
         return ext::Done{};
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
