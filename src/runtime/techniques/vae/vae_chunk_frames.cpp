// Kernel technique (VAE decoder): after the first latent frame (decoded alone, as the reference does),
// decode `vae_chunk_frames` latent frames per chunk instead of one. Every op of the decoder is causal in
// time and carries its context across chunks (the causal convs' last two frames, the temporal
// upsampler's cache), so the result is the same computation; the convs get 4x-16x more frames per call
// (fewer launches, larger GEMMs) at the cost of more activation memory per chunk. On the GPU other
// shapes may get other conv algorithms, so it is not claimed bit-identical.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_chunk_frames_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_chunk_frames) {
  Technique t;
  t.name = "vae_chunk_frames";
  t.family = "kernel";
  t.lossless = false;  // the same sums, but other conv shapes may pick other algorithms on the GPU
  t.summary = "VAE decode of several latent frames per chunk after the first (the reference decodes one at a time)";
  t.flags = {int_flag("vae_chunk_frames", field(&VaeChunkFramesOptions::frames), 1, 16,
                      "latent frames per VAE decoder chunk after the first")};
  t.switch_flag = "vae_chunk_frames";
  t.hooks = {"vae.decode_chunks"};
  t.engagement = {
      {"kernel.vae_chunk_frames.chunks", "vae_chunk_frames is above 1 but no chunk had more than one latent frame"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_chunk_frames-4", {{"vae_chunk_frames", 4}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include <algorithm>
#include <vector>

#include "runtime/extension_points.h"
#include "runtime/wan_vae.h"

namespace autooptim::runtime::techniques {

// The chunk plan at the decoder's chunks point: the first latent frame alone, then vae_chunk_frames per
// chunk (the last one shorter where they do not divide the rest).
AUTOOPTIM_EXTENSIONS(vae_chunk_frames) {
  points.vae_chunks.add(
      {"vae_chunk_frames", 10, [](const RuntimeOptions& o) { return o.of<VaeChunkFramesOptions>().frames > 1; },
       [](int64_t frames, const VaeRun& run) -> std::optional<std::vector<int64_t>> {
         const int64_t per_chunk = std::max<int64_t>(1, run.options->of<VaeChunkFramesOptions>().frames);
         std::vector<int64_t> chunks;
         for (int64_t i = 0; i < frames;) {
           const int64_t n = i == 0 ? 1 : std::min(per_chunk, frames - i);
           if (n > 1) run.count("kernel.vae_chunk_frames.chunks");
           chunks.push_back(n);
           i += n;
         }
         return chunks;
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
