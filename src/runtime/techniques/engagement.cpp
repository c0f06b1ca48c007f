#include "runtime/techniques/engagement.h"

namespace autooptim::runtime {

std::vector<std::string> engagement_problems(const RuntimeOptions& o, const Trace& t) {
  std::vector<std::string> out;
  const double forwards = t.get("transformer.forwards");
  auto need = [&](bool on, const char* flag, const char* key, const char* what) {
    if (on && t.get(key) <= 0) out.push_back(std::string(flag) + " is on but " + what + " (" + key + " = 0)");
  };
  need(o.fused_qkv, "fused_qkv", "kernel.fused_qkv.launches", "no fused QKV projection ran");
  need(o.cross_kv_cache, "cross_kv_cache", "kernel.cross_kv_cache.hits", "no cached cross-attention K/V was reused");
  need(o.timestep_dedup, "timestep_dedup", "kernel.timestep_dedup.rows_saved", "no time-embedding row was saved");
  need(o.cuda_graph, "cuda_graph", "kernel.cuda_graph.replays", "no graph was replayed");
  need(o.fused_norm_modulate, "fused_norm_modulate", "kernel.fused_norm_modulate.launches",
       "no fused norm+modulation kernel ran (needs a CUDA build and bf16 on the GPU)");
  need(o.fused_gate_residual, "fused_gate_residual", "kernel.fused_gate_residual.launches",
       "no fused gate+residual kernel ran (needs a CUDA build and bf16 on the GPU)");
  need(o.fused_qk_norm_rope, "fused_qk_norm_rope", "kernel.fused_qk_norm_rope.launches",
       "no fused q/k norm+RoPE kernel ran (needs a CUDA build and bf16 on the GPU)");
  need(o.gelu_epilogue, "gelu_epilogue", "kernel.gelu_epilogue.launches",
       "no GEMM with a GELU epilogue ran (needs a CUDA build and bf16 on the GPU)");
  need(o.quant.fp8, "quant.fp8", "quant.fp8.gemms", "no FP8 GEMM ran (needs a CUDA build, libtorch >= 2.5 and an sm_89+ GPU)");
  if (o.attention_backend != "auto") {
    const std::string key = "kernel.attention." + o.attention_backend + ".calls";
    if (t.get(key) <= 0) out.push_back("attention_backend " + o.attention_backend + " is set but no attention ran on it (" + key + " = 0)");
  }
  if (o.easycache.enabled) {
    need(true, "easycache", "cache.easycache.skipped_forwards", "no forward was skipped");
    const double skipped = t.get("cache.easycache.skipped_forwards");
    if (skipped > 0 && forwards > 0 && t.get("cache.easycache.computed_forwards") != forwards)
      out.push_back("easycache: computed forwards in its counters disagree with the transformer's");
  }
  if (o.sparse.pattern != "none") {
    need(true, "sparse", "sparse.attention.calls", "no sparse attention ran");
    const double d = t.get("sparse.attention.density");
    if (t.get("sparse.attention.calls") > 0 && !(d > 0 && d < 1))
      out.push_back("sparse: achieved attention density " + std::to_string(d) + " is not below 1");
  }
  return out;
}

}  // namespace autooptim::runtime
