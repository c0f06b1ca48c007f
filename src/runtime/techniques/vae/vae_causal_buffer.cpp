// Kernel technique (VAE decoder): each causal 3x3x3 conv keeps one buffer [B, C, 2 + T, H, W] per chunk
// shape whose first two frames are the previous chunk's context: the chunk is written behind them and
// the conv reads the buffer whole. Replaces the concatenation (a copy of context and chunk) and the
// cloned cache of every conv; with vae_fused_norm_silu the norm writes there directly, so the chunk is
// never copied at all. The conv sees the same values in the same shape: the output is the baseline's.
#include "runtime/techniques/registry.h"
#include "runtime/techniques/vae/vae_causal_buffer_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(vae_causal_buffer) {
  Technique t;
  t.name = "vae_causal_buffer";
  t.family = "kernel";
  t.lossless = true;  // the same conv on the same values (tests/runtime/test_vae.cpp checks bit-identity on the CPU)
  t.summary = "VAE causal convs read [context, chunk] from one reused buffer instead of a concatenation";
  t.flags = {
      bool_flag("vae_causal_buffer", field(&VaeCausalBufferOptions::on), "causal convs without concatenation copies")};
  t.switch_flag = "vae_causal_buffer";
  t.hooks = {"vae.causal_conv"};
  t.engagement = {{"kernel.vae_causal_buffer.convs", "vae_causal_buffer is on but no causal conv used its buffer"}};
  // On the CPU too: the concatenations it removes are ~15% of the tiny decode there (0.63 s -> 0.54 s with
  // vae_channels_last).
  t.search = [](const SearchContext&) {
    return std::vector<SearchPoint>{{"vae_causal_buffer", {{"vae_causal_buffer", true}}}};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include <vector>

#include "runtime/extension_points.h"
#include "runtime/profile.h"
#include "runtime/techniques/vae/vae_ops.h"
#include "runtime/wan_vae.h"

namespace autooptim::runtime::techniques {
namespace {

// conv(silu(norm(x))) with the conv's temporal context kept in one buffer per conv: the norm writes into
// the buffer behind the context, and the conv reads the window [context, chunk] in place. The slot's
// buffer [B, C, 2 + R*T, H, W] holds R chunks' windows one after the other, each window's context the
// previous chunk's last two frames, already in place; when the next window does not fit, those two
// frames are copied to the front (every chunk where R is 1). A new chunk length (the first chunk's single
// frame, then four) makes a new buffer that takes over the context. R > 1 (vae_causal_ring) only where a
// window is a dense tensor in the conv's layout (a channels-last batch of one): elsewhere the conv would
// copy the window.
at::Tensor buffered_norm_silu_conv(const WanCausalConv3dImpl& conv, const at::Tensor& x, const WanRMSNormImpl& norm,
                                   WanCausalCache& cache) {
  const VaeRun* run = cache.run;
  auto& slot = cache.take();
  const int64_t B = x.size(0), C = x.size(1), T = x.size(2), H = x.size(3), W = x.size(4);
  const int64_t ring = vae_causal_ring(run, B);
  at::Tensor buf = slot.frames;
  if (!buf.defined() || buf.size(0) != B || buf.size(1) != C || buf.size(2) != ring * T + 2 || buf.size(3) != H ||
      buf.size(4) != W) {
    ProfileScope ps("layout");
    // Channels-last decodes keep the buffer channels-last whatever x looks like (a one-frame x is both
    // layouts at once, and a channels-first buffer makes cuDNN convert it on every conv).
    const auto fmt = vae_channels_last(run) ? at::MemoryFormat::ChannelsLast3d : x.suggest_memory_format();
    // at::empty honours the memory format; at::zeros drops it (a channels-first buffer, whatever fmt says).
    at::Tensor nb = at::empty({B, C, ring * T + 2, H, W}, x.options().memory_format(fmt)).zero_();
    if (buf.defined()) nb.narrow(2, 0, 2).copy_(buf.narrow(2, slot.pos, 2));
    buf = nb;
    slot.pos = 0;
  }
  const at::Tensor window = buf.narrow(2, slot.pos, T + 2);
  if (slot.pos > 0) run->count("kernel.vae_causal_ring.windows");
  norm.forward_silu_into(x, window.narrow(2, 2, T), run);
  const at::Tensor out = conv.conv(window, run);
  slot.pos += T;  // the next window's context: this chunk's last two frames
  if (slot.pos + T + 2 > buf.size(2)) {
    ProfileScope ps("layout", [] { return ProfileDetail{"causal context to the buffer's front"}; });
    if (slot.pos >= 2)
      buf.narrow(2, 0, 2).copy_(buf.narrow(2, slot.pos, 2));
    else
      buf.narrow(2, 0, 2).copy_(buf.narrow(2, slot.pos, 2).clone());
    slot.pos = 0;
  }
  slot.frames = buf;
  run->count("kernel.vae_causal_buffer.convs");
  return out;
}

}  // namespace

// The buffered form at the decoder's cached norm+SiLU+conv point, for the 3x3x3 causal convs.
AUTOOPTIM_EXTENSIONS(vae_causal_buffer) {
  points.vae_cached_norm_silu_conv.add(
      {"vae_causal_buffer", 10, [](const RuntimeOptions& o) { return o.of<VaeCausalBufferOptions>().on; },
       [](const WanCausalConv3dImpl& conv, const at::Tensor& x, const WanRMSNormImpl& norm,
          WanCausalCache& cache) -> std::optional<at::Tensor> {
         const bool fits = conv.front_pad == 2 && conv.stride == std::vector<int64_t>{1, 1, 1} &&
                           x.scalar_type() == conv.weight.scalar_type();
         if (!fits || !cache.run) return std::nullopt;
         return buffered_norm_silu_conv(conv, x, norm, cache);
       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
