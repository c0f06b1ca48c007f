#pragma once
// Extension points: the named places where the model lets a technique take over one step of its forward,
// its decode or the pipeline around them. The model calls a point; where no technique takes the call, the
// model runs its own reference code (what it computes with every technique off). The model never names a
// technique.
//
// A technique plugs in from its own file (techniques/<family>/<name>.cpp):
//
//   AUTOOPTIM_EXTENSIONS(my_technique) {
//     points.linear.add({"my_technique", /*priority=*/10, [](const RuntimeOptions& o) { return o.my_flag; },
//                        [](const Linear& lin, const at::Tensor& x, const ForwardContext* fc) ->
//                        std::optional<at::Tensor> {
//                          ...; return std::nullopt;  // declined: the next override, then the reference, runs
//                        }});
//   }
//
// src/runtime/CMakeLists.txt finds the AUTOOPTIM_EXTENSIONS lines and lists them for extension_points.cpp,
// which calls each once, on first use of the registry (a static library would drop a file that nothing
// references, and static initialisers would run in no set order). A test may add and remove overrides
// itself at any time.
//
// The overrides that are on are resolved once per transformer forward (TransformerPoints) or decode
// (VaePoints), by the predicate each registered with, highest priority first; a call then walks that short
// list. An override may still decline one call (std::nullopt), e.g. a CUDA kernel given a CPU tensor.
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/nn.h"
#include "runtime/options.h"
#include "runtime/profile.h"
#include "runtime/trace.h"

namespace autooptim::runtime {

struct ForwardContext;
struct VaeRun;
struct WanCausalCache;
class WanCausalConv3dImpl;
class WanRMSNormImpl;

// State a technique keeps beside a module (weights it derives once, tables it caches), by technique name,
// so the module needs no field per technique.
class TechniqueState {
 public:
  template <typename T>
  T& get(const std::string& technique) {
    auto& slot = slots_[technique];
    if (!slot) slot = std::make_shared<T>();
    return *static_cast<T*>(slot.get());
  }

 private:
  std::map<std::string, std::shared_ptr<void>> slots_;
};

namespace ext {

using Predicate = std::function<bool(const RuntimeOptions&)>;

// One extension point: the overrides techniques registered at it. Fn is what an override provides.
template <typename Fn>
class Point {
 public:
  struct Override {
    std::string technique;
    int priority = 0;  // the higher runs first where two are on
    Predicate on;      // whether the technique is on under these options
    Fn fn;
  };

  explicit Point(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  // Adds an override, replacing the technique's earlier one at this point.
  void add(Override o) {
    remove(o.technique);
    overrides_.push_back(std::move(o));
    std::stable_sort(overrides_.begin(), overrides_.end(), [](const Override& a, const Override& b) {
      return a.priority != b.priority ? a.priority > b.priority : a.technique < b.technique;
    });
  }
  void remove(const std::string& technique) {
    overrides_.erase(std::remove_if(overrides_.begin(), overrides_.end(),
                                    [&](const Override& o) { return o.technique == technique; }),
                     overrides_.end());
  }
  const std::vector<Override>& overrides() const { return overrides_; }

  // The overrides on under `o`, highest priority first; none without options (the reference).
  std::vector<const Fn*> resolve(const RuntimeOptions* o) const {
    std::vector<const Fn*> on;
    if (o)
      for (const auto& ov : overrides_)
        if (ov.on(*o)) on.push_back(&ov.fn);
    return on;
  }

 private:
  std::string name_;
  std::vector<Override> overrides_;
};

// The first result of a resolved chain of overrides, or nullopt when every one declined (or none is on):
// the caller then runs its reference.
template <typename Fn, typename... A>
auto first_taker(const std::vector<const Fn*>& chain, A&&... args) -> decltype((*chain.front())(args...)) {
  for (const Fn* f : chain)
    if (auto r = (*f)(args...)) return r;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------
// The transformer's points (wan_transformer.cpp)

// The bytes a block's element-wise step must move at least (`bench --profile-detail` prints GB/s): `acts`
// activation-sized tensors of x read or written, and `mod_rows` rows of the modulation (per token: each
// the activations' size in tproj's type; per sample: negligible).
inline ProfileDetail block_traffic(const char* what, const at::Tensor& x, const at::Tensor& tproj, int acts,
                                   int mod_rows) {
  const double act = static_cast<double>(x.numel()) * x.element_size();
  const double row = tproj.dim() == 4 ? static_cast<double>(x.numel()) * tproj.element_size() : 0.0;
  return ProfileDetail{what, 0, acts * act + mod_rows * row};
}

// y = lin(x) for the blocks' linear layers (attention projections, FFN).
using LinearFn =
    std::function<std::optional<at::Tensor>(const Linear& lin, const at::Tensor& x, const ForwardContext* fc)>;
// The self-attention's q, k, v projections of x [B, L, D], each [B, L, D].
struct QkvWeights {
  const Linear& q;
  const Linear& k;
  const Linear& v;
  TechniqueState& state;  // the attention module's technique state (merged weights)
};
struct Qkv {
  at::Tensor q, k, v;
};
using QkvFn = std::function<std::optional<Qkv>(const QkvWeights& w, const at::Tensor& x, const ForwardContext* fc)>;
// The FFN: out(gelu_tanh(in(h))) for h [B, L, D].
using FfnFn = std::function<std::optional<at::Tensor>(const Linear& in, const Linear& out, const at::Tensor& h,
                                                      const ForwardContext* fc)>;
// The FFN's first projection with its activation: gelu_tanh(lin(x)).
using LinearGeluFn = LinearFn;
// The adaLN modulation of x [B, L, D]: LN(x) * (1 + mod[k_scale]) + mod[k_shift] in x's dtype, where
// mod = table [1, 6, D] (fp32) + tproj [B, 6, D] or [B, L, 6, D].
using NormModulateFn =
    std::function<std::optional<at::Tensor>(const at::Tensor& x, const at::Tensor& table, const at::Tensor& tproj,
                                            int k_shift, int k_scale, double eps, const ForwardContext* fc)>;
// The gated residual: res + branch * mod[k_gate] (in float32, rounded to res's dtype).
using GateResidualFn =
    std::function<std::optional<at::Tensor>(const at::Tensor& res, const at::Tensor& branch, const at::Tensor& table,
                                            const at::Tensor& tproj, int k_gate, const ForwardContext* fc)>;
// The block's norm2: LN(x) * weight + bias (fp32 affine), in x's dtype.
using AffineNormFn = std::function<std::optional<at::Tensor>(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps, const ForwardContext* fc)>;
// The cross-attention's residual and the FFN's norm+modulate after it: {x + y, norm_modulate(x + y)}.
using ResidualNormModulateFn = std::function<std::optional<std::pair<at::Tensor, at::Tensor>>(
    const at::Tensor& x, const at::Tensor& y, const at::Tensor& table, const at::Tensor& tproj, int k_shift,
    int k_scale, double eps, const ForwardContext* fc)>;
// The self-attention's q/k RMSNorm and rotary embedding, in place on q, k [B, L, D] (cos/sin [L, d/2]).
struct Done {};
using QkNormRopeFn = std::function<std::optional<Done>(
    at::Tensor& q, at::Tensor& k, const RMSNorm& norm_q, const RMSNorm& norm_k, const at::Tensor& cos,
    const at::Tensor& sin, int64_t head_dim, const ForwardContext* fc)>;
// softmax(q k^T / sqrt(d)) v for q, k, v [B, heads, L, d] (self and cross).
using AttentionFn = std::function<std::optional<at::Tensor>(const at::Tensor& q, const at::Tensor& k,
                                                            const at::Tensor& v, const ForwardContext* fc)>;
// A sparse pattern for self-attention. The model counts the calls that take it (WorkCount) itself.
struct SparseAttention {
  std::function<bool(const ForwardContext& fc)> step_sparse;  // this forward's step has sparse layers
  std::function<bool(const ForwardContext& fc)> engaged;      // this layer's self-attention goes sparse
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const ForwardContext& fc)>
      attend;
  std::function<void(const at::Tensor& q, const ForwardContext& fc)> dense_call;  // a dense call instead
};
// The per-sample timesteps [B] of a per-token t [B, L] whose tokens all carry their sample's value.
using TimestepsFn = std::function<std::optional<at::Tensor>(const at::Tensor& t, const ForwardContext* fc)>;
// The time embedding {temb, tproj} of timesteps t [N]; embed() computes it for any [U] of timesteps.
using TimeEmbedding = std::pair<at::Tensor, at::Tensor>;
using TimeEmbeddingFn = std::function<std::optional<TimeEmbedding>(
    const at::Tensor& t, const std::function<TimeEmbedding(const at::Tensor&)>& embed, const ForwardContext* fc)>;
// Values that depend only on the prompt (ctx_key) and the block (fc->layer): the projected text and the
// cross-attention's K/V; compute() gives them.
using TextProjectionFn = std::function<std::optional<at::Tensor>(
    const void* ctx_key, const std::function<at::Tensor()>& compute, const ForwardContext* fc)>;
using CrossKvFn = std::function<std::optional<std::pair<at::Tensor, at::Tensor>>(
    const void* ctx_key, const std::function<std::pair<at::Tensor, at::Tensor>()>& compute, const ForwardContext* fc)>;
// The rotary tables cos/sin [F*H*W, d/2] of a latent grid; compute() builds them; state is the model's.
using RopeTablesFn = std::function<std::optional<std::pair<at::Tensor, at::Tensor>>(
    TechniqueState& state, int64_t f, int64_t h, int64_t w,
    const std::function<std::pair<at::Tensor, at::Tensor>()>& compute, const ForwardContext* fc)>;

// The transformer's overrides that are on for one forward.
struct TransformerPoints {
  std::vector<const LinearFn*> linear;
  std::vector<const QkvFn*> qkv;
  std::vector<const FfnFn*> ffn;
  std::vector<const LinearGeluFn*> linear_gelu;
  std::vector<const NormModulateFn*> norm_modulate;
  std::vector<const GateResidualFn*> gate_residual;
  std::vector<const AffineNormFn*> affine_norm;
  std::vector<const ResidualNormModulateFn*> residual_norm_modulate;
  std::vector<const QkNormRopeFn*> qk_norm_rope;
  std::vector<const AttentionFn*> attention;
  const SparseAttention* sparse_attention = nullptr;  // at most one pattern: the first that is on
  std::vector<const TimestepsFn*> timesteps;
  std::vector<const TimeEmbeddingFn*> time_embedding;
  std::vector<const TextProjectionFn*> text_projection;
  std::vector<const CrossKvFn*> cross_kv;
  std::vector<const RopeTablesFn*> rope_tables;

  static TransformerPoints resolve(const RuntimeOptions* o);
};

// ---------------------------------------------------------------------------------------------------
// The VAE decoder's points (wan_vae.cpp) and the pipeline's decode stage (wan_pipeline.cpp)

// A conv of the decoder: weight [Co, C, kt, kh, kw], padded spatially by `padding` (in time the input is
// already padded). module: the causal conv it belongs to (null for a per-frame 2D conv).
struct VaeConv {
  const at::Tensor& weight;
  const at::Tensor& bias;
  at::IntArrayRef stride;
  at::IntArrayRef padding;
  bool causal = false;  // front-padded in time (temporal taps over cached frames)
  const WanCausalConv3dImpl* module = nullptr;
};
using VaeConvFn = std::function<std::optional<at::Tensor>(const at::Tensor& in, const VaeConv& c, const VaeRun& run)>;
// silu(rms_norm(x) * gamma) for x [B, C, T, H, W]: into dst where it is defined (any strides), else into a
// new tensor; returns the result.
using VaeNormSiluFn = std::function<std::optional<at::Tensor>(const at::Tensor& x, const at::Tensor& gamma,
                                                              const at::Tensor& dst, const VaeRun& run)>;
// conv(silu(norm(x))) of a causal conv in the cached form (taking the conv's slot of the cache).
using VaeCachedNormSiluConvFn = std::function<std::optional<at::Tensor>(
    const WanCausalConv3dImpl& conv, const at::Tensor& x, const WanRMSNormImpl& norm, WanCausalCache& cache)>;
// Nearest 2x of each frame then the 3x3 conv (weight [Co, C, 3, 3]): [B, C, T, H, W] -> [B, Co, T, 2H, 2W].
// state: the resample module's technique state (folded weights).
using VaeUpsampleFn = std::function<std::optional<at::Tensor>(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, TechniqueState& state, const VaeRun& run)>;
// The up block's shortcut h += DupUp3D(x) in place (ft: temporal factor; first_chunk drops ft-1 frames).
using VaeShortcutFn = std::function<std::optional<Done>(at::Tensor& h, const at::Tensor& x, int64_t ft,
                                                        bool first_chunk, const VaeRun& run)>;
// The decode's chunks: latent frames per chunk for `frames` latent frames, the first frame alone.
using VaeChunksFn = std::function<std::optional<std::vector<int64_t>>(int64_t frames, const VaeRun& run)>;
// Keeps a causal conv's context for the next chunk: `keep` into the slot's `frames`.
using VaeKeepContextFn =
    std::function<std::optional<Done>(at::Tensor& frames, const at::Tensor& keep, const VaeRun& run)>;
// Runs the decoder's chunks: body(in) for the k-th chunk, eagerly or replayed. A replayed result may be
// the runner's own buffer: valid until the next chunk.
class VaeChunkRunner {
 public:
  virtual ~VaeChunkRunner() = default;
  virtual at::Tensor chunk(int64_t k, const at::Tensor& in, WanCausalCache& cache,
                           const std::function<at::Tensor(const at::Tensor& in)>& body) = 0;
};
using VaeChunkRunnerFn = std::function<std::unique_ptr<VaeChunkRunner>(const VaeRun& run)>;
// Around one decode in the pipeline: set up when made (a library setting), decoded() after the decode
// succeeded (its engagement counters), undone when destroyed.
class DecodeStage {
 public:
  virtual ~DecodeStage() = default;
  virtual void decoded(const VaeRun& run) { (void)run; }
};
using DecodeStageFn = std::function<std::unique_ptr<DecodeStage>(const at::Tensor& z, const VaeRun& run)>;

// The decoder's overrides that are on for one decode.
struct VaePoints {
  std::vector<const VaeConvFn*> conv;
  std::vector<const VaeNormSiluFn*> norm_silu;
  std::vector<const VaeCachedNormSiluConvFn*> cached_norm_silu_conv;
  std::vector<const VaeUpsampleFn*> upsample;
  std::vector<const VaeShortcutFn*> shortcut;
  std::vector<const VaeChunksFn*> chunks;
  std::vector<const VaeKeepContextFn*> keep_context;
  std::vector<const VaeChunkRunnerFn*> chunk_runner;
  // The decode's activations and weights are channels-last (the layout point's first override).
  bool channels_last = false;

  static VaePoints resolve(const RuntimeOptions* o);
};

// The pipeline's text encoding: the encoder runs over the prompt's own tokens instead of all 512 padded ones,
// and the token rows it did not encode are counted under `tokens_saved_counter` (the technique's engagement).
struct TextEncoding {
  bool prompt_tokens_only = false;
  std::string tokens_saved_counter;
};
// The text encoding's override that is on (the first), else the reference: every padded token.
TextEncoding resolve_text_encoding(const RuntimeOptions& o);

// The pipeline's decode: the weights' dtype and layout of the decoding copy of the VAE, and the stages
// around the decode.
struct DecodePoints {
  std::optional<at::ScalarType> dtype;  // a copy of the VAE's weights in this dtype (else the loaded one's)
  bool channels_last = false;           // a channels-last copy of the weights
  std::vector<const DecodeStageFn*> stages;

  static DecodePoints resolve(const RuntimeOptions& o);
};

}  // namespace ext

// The transformer's body (patch embedding, blocks, head) as a function of its inputs, and a runner that
// may replay it (ForwardContext::replay: the pipeline makes one per generation through the
// pipeline.forward_replay point, e.g. CUDA graphs).
using ForwardBody = std::function<at::Tensor(const std::vector<at::Tensor>& inputs, ForwardContext& fc)>;
class ForwardReplay {
 public:
  virtual ~ForwardReplay() = default;
  // body(inputs, fc) for `key` (shape, prompt and phase of the forward), run or replayed.
  virtual at::Tensor run(const std::string& key, const std::vector<at::Tensor>& inputs, const ForwardContext& fc,
                         const ForwardBody& body) = 0;
  // Whether the last run() computed the body (ran it, or replayed a capture of it): the transformer then counts
  // every block as run. A runner that answered without it (a step cache) says false, and no block is counted.
  virtual bool computed_last() const { return true; }
};

namespace ext {

// A runner of the transformer's body for one generation (or one bench/screen loop), made where a technique at
// pipeline.forward_replay is on; its caches must outlive it (the caller's cross-attention K/V among them).
using ForwardReplayFactory = std::function<std::unique_ptr<ForwardReplay>()>;
// The forward replay of the first override that is on, or none (the body runs eagerly).
std::unique_ptr<ForwardReplay> make_forward_replay(const RuntimeOptions& o);

// ---------------------------------------------------------------------------------------------------
// The registry

struct Points {
  Point<LinearFn> linear{"linear"};
  Point<QkvFn> qkv{"self_attention.qkv_projection"};
  Point<FfnFn> ffn{"block.ffn"};
  Point<LinearGeluFn> linear_gelu{"block.ffn_linear_gelu"};
  Point<NormModulateFn> norm_modulate{"block.norm_modulate"};
  Point<GateResidualFn> gate_residual{"block.gate_residual"};
  Point<AffineNormFn> affine_norm{"block.norm2"};
  Point<ResidualNormModulateFn> residual_norm_modulate{"block.cross_residual_norm_modulate"};
  Point<QkNormRopeFn> qk_norm_rope{"self_attention.qk_norm_rope"};
  Point<AttentionFn> attention{"attention"};
  Point<SparseAttention> sparse_attention{"self_attention.sparse_pattern"};
  Point<TimestepsFn> timesteps{"time.timesteps"};
  Point<TimeEmbeddingFn> time_embedding{"time.embedding"};
  Point<TextProjectionFn> text_projection{"text.projection"};
  Point<CrossKvFn> cross_kv{"cross_attention.kv"};
  Point<RopeTablesFn> rope_tables{"rope.tables"};

  Point<VaeConvFn> vae_conv{"vae.conv"};
  Point<VaeNormSiluFn> vae_norm_silu{"vae.norm_silu"};
  Point<VaeCachedNormSiluConvFn> vae_cached_norm_silu_conv{"vae.cached_norm_silu_conv"};
  Point<VaeUpsampleFn> vae_upsample{"vae.upsample"};
  Point<VaeShortcutFn> vae_shortcut{"vae.shortcut"};
  Point<VaeChunksFn> vae_chunks{"vae.decode_chunks"};
  Point<VaeKeepContextFn> vae_keep_context{"vae.keep_context"};
  Point<VaeChunkRunnerFn> vae_chunk_runner{"vae.chunk_runner"};
  Point<at::MemoryFormat> vae_layout{"vae.layout"};  // an override's value: the decode's memory format

  Point<at::ScalarType> decode_dtype{"pipeline.decode_dtype"};  // an override's value: the decoding dtype
  Point<TextEncoding> text_encoding{"pipeline.encode_text"};    // an override's value: how prompts are encoded
  Point<DecodeStageFn> decode_stage{"pipeline.decode"};
  Point<ForwardReplayFactory> forward_replay{"pipeline.forward_replay"};
};

// Calls f(a.x, b.x) for each point x of two registries, in declaration order (a plugin's overrides are made in a
// registry of their own, checked, then moved into points()).
// Every point is the same size whatever its function: a point added to Points and not here fails to compile.
static_assert(sizeof(Points) == 29 * sizeof(Point<LinearFn>), "for_each_point_pair must visit every point");
template <typename F>
void for_each_point_pair(Points& a, Points& b, F&& f) {
  f(a.linear, b.linear);
  f(a.qkv, b.qkv);
  f(a.ffn, b.ffn);
  f(a.linear_gelu, b.linear_gelu);
  f(a.norm_modulate, b.norm_modulate);
  f(a.gate_residual, b.gate_residual);
  f(a.affine_norm, b.affine_norm);
  f(a.residual_norm_modulate, b.residual_norm_modulate);
  f(a.qk_norm_rope, b.qk_norm_rope);
  f(a.attention, b.attention);
  f(a.sparse_attention, b.sparse_attention);
  f(a.timesteps, b.timesteps);
  f(a.time_embedding, b.time_embedding);
  f(a.text_projection, b.text_projection);
  f(a.cross_kv, b.cross_kv);
  f(a.rope_tables, b.rope_tables);
  f(a.vae_conv, b.vae_conv);
  f(a.vae_norm_silu, b.vae_norm_silu);
  f(a.vae_cached_norm_silu_conv, b.vae_cached_norm_silu_conv);
  f(a.vae_upsample, b.vae_upsample);
  f(a.vae_shortcut, b.vae_shortcut);
  f(a.vae_chunks, b.vae_chunks);
  f(a.vae_keep_context, b.vae_keep_context);
  f(a.vae_chunk_runner, b.vae_chunk_runner);
  f(a.vae_layout, b.vae_layout);
  f(a.decode_dtype, b.decode_dtype);
  f(a.text_encoding, b.text_encoding);
  f(a.decode_stage, b.decode_stage);
  f(a.forward_replay, b.forward_replay);
}

// Every point, with the built-in techniques' overrides registered on first use.
Points& points();

}  // namespace ext

// The transformer's block stack, as a step cache sees it.
struct BlockStack {
  int64_t layers = 0;
  std::function<at::Tensor(int64_t i, const at::Tensor& h)> block;  // block i on tokens h [B, L, D]
  std::function<at::Tensor(const at::Tensor& h)> modulated_input;   // block 0's modulated input of h [B, L, D]
};

// Blocks [from, to) of the stack on h.
at::Tensor run_blocks(const BlockStack& s, at::Tensor h, int64_t from, int64_t to);

// The step cache's hook in the transformer: a policy the pipeline installs for a generation
// (ForwardContext::cache) may return the block stack's output without running every block.
class StepCache {
 public:
  virtual ~StepCache() = default;
  // The block stack's output for tokens h [B, L, D] of (step, branch).
  virtual at::Tensor blocks(const BlockStack& s, const at::Tensor& h, int64_t step, int branch) = 0;
  // True when blocks() decides between blocks on the host (the body cannot be replayed as a whole then).
  virtual bool hooks_blocks() const = 0;
};

}  // namespace autooptim::runtime

// Registers a technique's overrides: the body gets `points` (ext::Points&). See the top of this file.
#define AUTOOPTIM_EXTENSIONS(name) \
  void autooptim_extensions_##name([[maybe_unused]] ::autooptim::runtime::ext::Points& points)
