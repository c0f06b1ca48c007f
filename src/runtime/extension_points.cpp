#include "runtime/extension_points.h"

// The techniques' registrations, found by src/runtime/CMakeLists.txt (one AUTOOPTIM_EXTENSIONS_OF(name)
// line per AUTOOPTIM_EXTENSIONS(name) in techniques/*/*.cpp). Naming them here also keeps the linker
// from dropping their files out of the static runtime library.
namespace autooptim::runtime::techniques {
#define AUTOOPTIM_EXTENSIONS_OF(name) void autooptim_extensions_##name(::autooptim::runtime::ext::Points& points);
#include "extensions_list.inc"
#undef AUTOOPTIM_EXTENSIONS_OF
}  // namespace autooptim::runtime::techniques

namespace autooptim::runtime {
namespace ext {

Points& points() {
  // Built on first use, never destroyed: a registration from a test's static object may come first.
  static Points* const p = [] {
    auto* r = new Points;
#define AUTOOPTIM_EXTENSIONS_OF(name) techniques::autooptim_extensions_##name(*r);
#include "extensions_list.inc"
#undef AUTOOPTIM_EXTENSIONS_OF
    return r;
  }();
  return *p;
}

TransformerPoints TransformerPoints::resolve(const RuntimeOptions* o) {
  const Points& p = points();
  TransformerPoints r;
  r.linear = p.linear.resolve(o);
  r.qkv = p.qkv.resolve(o);
  r.ffn = p.ffn.resolve(o);
  r.linear_gelu = p.linear_gelu.resolve(o);
  r.norm_modulate = p.norm_modulate.resolve(o);
  r.gate_residual = p.gate_residual.resolve(o);
  r.affine_norm = p.affine_norm.resolve(o);
  r.residual_norm_modulate = p.residual_norm_modulate.resolve(o);
  r.qk_norm_rope = p.qk_norm_rope.resolve(o);
  r.attention = p.attention.resolve(o);
  const auto sparse = p.sparse_attention.resolve(o);
  r.sparse_attention = sparse.empty() ? nullptr : sparse.front();
  r.timesteps = p.timesteps.resolve(o);
  r.time_embedding = p.time_embedding.resolve(o);
  r.text_projection = p.text_projection.resolve(o);
  r.cross_kv = p.cross_kv.resolve(o);
  r.rope_tables = p.rope_tables.resolve(o);
  return r;
}

VaePoints VaePoints::resolve(const RuntimeOptions* o) {
  const Points& p = points();
  VaePoints r;
  r.conv = p.vae_conv.resolve(o);
  r.norm_silu = p.vae_norm_silu.resolve(o);
  r.cached_norm_silu_conv = p.vae_cached_norm_silu_conv.resolve(o);
  r.upsample = p.vae_upsample.resolve(o);
  r.shortcut = p.vae_shortcut.resolve(o);
  r.chunks = p.vae_chunks.resolve(o);
  r.keep_context = p.vae_keep_context.resolve(o);
  r.chunk_runner = p.vae_chunk_runner.resolve(o);
  const auto layout = p.vae_layout.resolve(o);
  r.channels_last = !layout.empty() && *layout.front() == at::MemoryFormat::ChannelsLast3d;
  return r;
}

DecodePoints DecodePoints::resolve(const RuntimeOptions& o) {
  const Points& p = points();
  DecodePoints r;
  if (const auto dtype = p.decode_dtype.resolve(&o); !dtype.empty()) r.dtype = *dtype.front();
  r.channels_last = VaePoints::resolve(&o).channels_last;
  r.stages = p.decode_stage.resolve(&o);
  return r;
}

TextEncoding resolve_text_encoding(const RuntimeOptions& o) {
  const auto on = points().text_encoding.resolve(&o);
  return on.empty() ? TextEncoding{} : *on.front();
}

std::unique_ptr<ForwardReplay> make_forward_replay(const RuntimeOptions& o) {
  const auto on = points().forward_replay.resolve(&o);
  return on.empty() ? nullptr : (*on.front())();
}

}  // namespace ext

at::Tensor run_blocks(const BlockStack& s, at::Tensor h, int64_t from, int64_t to) {
  for (int64_t i = from; i < to; ++i) h = s.block(i, h);
  return h;
}

}  // namespace autooptim::runtime
