// Kernel technique (VAE decoder): each causal 3x3x3 conv keeps one buffer [B, C, 2 + T, H, W] per chunk
// shape whose first two frames are the previous chunk's context: the chunk is written behind them and
// the conv reads the buffer whole. Replaces the concatenation (a copy of context and chunk) and the
// cloned cache of every conv; with vae_fused_norm_silu the norm writes there directly, so the chunk is
// never copied at all. The conv sees the same values in the same shape: the output is the baseline's.
#include "runtime/techniques/registry.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_causal_buffer) {
  Technique t;
  t.name = "vae_causal_buffer";
  t.family = "kernel";
  t.lossless = true;  // the same conv on the same values (tests/test_vae.cpp checks bit-identity on the CPU)
  t.summary = "VAE causal convs read [context, chunk] from one reused buffer instead of a concatenation";
  t.flags = {bool_flag("vae_causal_buffer", [](RuntimeOptions& o) -> bool& { return o.vae_causal_buffer; },
                       "causal convs without concatenation copies")};
  t.switch_flag = "vae_causal_buffer";
  t.hooks = {"vae.causal_conv"};
  t.engagement = {{"kernel.vae_causal_buffer.convs", "vae_causal_buffer is on but no causal conv used its buffer"}};
  // On the CPU too: the concatenations it removes are ~15% of the tiny decode there (0.63 s -> 0.54 s with
  // vae_channels_last).
  t.search = [](const SearchContext&) { return std::vector<SearchPoint>{{"vae_causal_buffer", {{"vae_causal_buffer", true}}}}; };
  return t;
}

}  // namespace autooptim::runtime::techniques
