// Kernel technique (VAE decoder): with vae_causal_buffer, each causal conv's buffer holds R chunks'
// windows [context, chunk] one after the other, so the next window's context (this chunk's last two
// frames) is already in place and is copied to the buffer's front only every R chunks, not every chunk.
// Those copies are a small share of a decode (two frames read and written per buffered conv per chunk);
// the buffers are R times as long, so the saving costs decode memory (docs/journal/2026-12-05.md).
// The conv reads the same values in the same layout: the output is the baseline's.
#include <algorithm>

#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_causal_ring_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_causal_ring) {
  Technique t;
  t.name = "vae_causal_ring";
  t.family = "kernel";
  t.lossless = true;  // the same conv on the same values (tests/runtime/test_vae.cpp checks bit-identity on the CPU)
  t.summary = "VAE causal buffers holding several chunks' windows: the context copied once per ring, not per chunk";
  t.flags = {int_flag("vae_causal_ring", field(&VaeCausalRingOptions::chunks), 0, 16,
                      "chunks each VAE causal buffer holds (0: off, one chunk, the context copied every chunk)")};
  t.switch_flag = "vae_causal_ring";
  t.check_flags = [](const RuntimeOptions& o) -> std::optional<FlagProblem> {
    if (o.of<VaeCausalRingOptions>().chunks == 1) return FlagProblem{"", "must be 0 (off) or at least 2 chunks, got 1"};
    return std::nullopt;
  };
  t.hooks = {"vae.causal_conv"};
  t.engagement = {{"kernel.vae_causal_ring.windows",
                   "vae_causal_ring is on but no causal conv read a window past its buffer's front (it needs "
                   "vae_causal_buffer and vae_channels_last, a batch of one, and more than one chunk)"}};
  t.search = [](const SearchContext& c) {
    return c.gpu ? std::vector<SearchPoint>{{"vae_causal_ring-4",
                                             {{"vae_causal_ring", 4},
                                              {"vae_causal_buffer", true},
                                              {"vae_channels_last", true}}}}
                 : std::vector<SearchPoint>{};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/techniques/vae/vae_ops.h"

namespace autooptim::runtime::techniques {

int64_t vae_causal_ring(const VaeRun* run, int64_t B) {
  // A frame range of a channels-last buffer is dense only for a batch of one; channels-first, never.
  if (!run || !run->options || !vae_channels_last(run) || B != 1) return 1;
  return std::max<int64_t>(1, run->options->of<VaeCausalRingOptions>().chunks);
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
