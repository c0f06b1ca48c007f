// Kernel technique (VAE decoder): after the first latent frame (decoded alone, as the reference does),
// decode `vae_chunk_frames` latent frames per chunk instead of one. Every op of the decoder is causal in
// time and carries its context across chunks (the causal convs' last two frames, the temporal
// upsampler's cache), so the result is the same computation; the convs get 4x-16x more frames per call
// (fewer launches, larger GEMMs) at the cost of more activation memory per chunk. On the GPU other
// shapes may get other conv algorithms, so it is not claimed bit-identical.
#include "runtime/techniques/registry.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_chunk_frames) {
  Technique t;
  t.name = "vae_chunk_frames";
  t.family = "kernel";
  t.lossless = false;  // the same sums, but other conv shapes may pick other algorithms on the GPU
  t.summary = "VAE decode of several latent frames per chunk after the first (the reference decodes one at a time)";
  t.flags = {int_flag("vae_chunk_frames", [](RuntimeOptions& o) -> int64_t& { return o.vae_chunk_frames; }, 1, 16,
                      "latent frames per VAE decoder chunk after the first")};
  t.switch_flag = "vae_chunk_frames";
  t.hooks = {"vae.decode_chunks"};
  t.engagement = {{"kernel.vae_chunk_frames.chunks", "vae_chunk_frames is above 1 but no chunk had more than one latent frame"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_chunk_frames-4", {{"vae_chunk_frames", 4}}}} : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques
