// Kernel technique: cross-attention K/V computed once per prompt and generation (see cross_kv_cache.h).
#include "runtime/techniques/registry.h"
#include "runtime/techniques/kernel/cross_kv_cache_options.h"

namespace autooptim::runtime::techniques {

AUTOOPTIM_TECHNIQUE(cross_kv_cache) {
  Technique t;
  t.name = "cross_kv_cache";
  t.family = "kernel";
  t.lossless = true;
  t.summary = "cross-attention K/V and the projected text computed once per prompt, reused across steps";
  t.flags = always_written(
      {bool_flag("cross_kv_cache", field(&CrossKvCacheOptions::on), "cross-attention K/V cached per prompt")});
  t.switch_flag = "cross_kv_cache";
  t.hooks = {"cross_attention.kv_projection", "transformer.text_projection"};
  t.engagement = {{"kernel.cross_kv_cache.hits", "cross_kv_cache is on but no cached cross-attention K/V was reused"}};
  t.search = [](const SearchContext&) {
    return std::vector<SearchPoint>{{"cross_kv_cache", {{"cross_kv_cache", true}}}};
  };
  return t;
}

}  // namespace autooptim::runtime::techniques

#if AUTOOPTIM_TECHNIQUE_HOOKS
#include "runtime/extension_points.h"
#include "runtime/forward_context.h"
#include "runtime/techniques/kernel/cross_kv_cache.h"

namespace autooptim::runtime::techniques {
namespace {
CrossKVCache* cache_of(const ForwardContext* fc, const void* ctx_key) {
  return fc && fc->options && fc->options->of<CrossKvCacheOptions>().on && fc->cross_kv && ctx_key ? fc->cross_kv
                                                                                                   : nullptr;
}
}  // namespace

std::pair<at::Tensor, at::Tensor> cross_attention_kv(
    const ForwardContext* fc, const void* ctx_key, const std::function<std::pair<at::Tensor, at::Tensor>()>& compute) {
  CrossKVCache* cache = cache_of(fc, ctx_key);
  if (!cache) return compute();
  const std::pair<int64_t, const void*> key{fc->layer, ctx_key};
  if (auto hit = cache->entries.find(key); hit != cache->entries.end()) {
    fc->count("kernel.cross_kv_cache.hits");
    return hit->second;
  }
  auto kv = compute();
  cache->entries[key] = kv;
  fc->count("kernel.cross_kv_cache.misses");
  return kv;
}

at::Tensor projected_text(const ForwardContext* fc, const void* ctx_key, const std::function<at::Tensor()>& compute) {
  CrossKVCache* cache = cache_of(fc, ctx_key);
  if (!cache) return compute();
  const std::pair<int64_t, const void*> key{-1, ctx_key};
  if (auto hit = cache->entries.find(key); hit != cache->entries.end()) return hit->second.first;
  at::Tensor text = compute();
  cache->entries[key] = {text, at::Tensor()};
  return text;
}

AUTOOPTIM_EXTENSIONS(cross_kv_cache) {
  const auto on = [](const RuntimeOptions& o) { return o.of<CrossKvCacheOptions>().on; };
  points.text_projection.add(
      {"cross_kv_cache", 10, on,
       [](const void* ctx_key, const std::function<at::Tensor()>& compute,
          const ForwardContext* fc) -> std::optional<at::Tensor> { return projected_text(fc, ctx_key, compute); }});
  points.cross_kv.add({"cross_kv_cache", 10, on,
                       [](const void* ctx_key, const std::function<std::pair<at::Tensor, at::Tensor>()>& compute,
                          const ForwardContext* fc) -> std::optional<std::pair<at::Tensor, at::Tensor>> {
                         return cross_attention_kv(fc, ctx_key, compute);
                       }});
}

}  // namespace autooptim::runtime::techniques
#endif  // AUTOOPTIM_TECHNIQUE_HOOKS
