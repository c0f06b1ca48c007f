#include "runtime/wan_transformer.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/error.h"
#include "runtime/config_json.h"
#include "runtime/profile.h"
#include "runtime/torch_compat.h"

namespace autooptim::runtime {
namespace {

// Chunk k of a modulation table: [B, n, D] -> [B, 1, D] (broadcast over tokens); [B, L, n, D] -> [B, L, D].
at::Tensor mod_chunk(const at::Tensor& mod, int64_t k) {
  return mod.dim() == 3 ? mod.select(1, k).unsqueeze(1) : mod.select(2, k);
}

// Interleaved-pair rotation of x [B, L, H, d] by angles cos/sin [L, d/2]: each pair (a, b) is the
// complex number a + ib multiplied by cos + i sin, in float32 (one pass instead of six).
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto B = x.size(0), L = x.size(1), H = x.size(2), d = x.size(3);
  const at::Tensor xc = at::view_as_complex(x.to(at::kFloat).reshape({B, L, H, d / 2, 2}));  // [B, L, H, d/2]
  const at::Tensor rot = at::view_as_complex(at::stack({cos, sin}, -1)).view({1, L, 1, d / 2});
  return at::view_as_real(xc * rot).reshape({B, L, H, d}).to(x.scalar_type());
}

}  // namespace

WanTransformerConfig WanTransformerConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("transformer config: not a JSON object");
  WanTransformerConfig c;
  const ConfigReader cfg(j, "transformer");
  // The widths and counts have no default a checkpoint could rely on (diffusers' class defaults are
  // another model's): they must be written out.
  cfg.read("patch_size", c.patch_size);
  cfg.require("num_attention_heads", c.num_attention_heads);
  cfg.require("attention_head_dim", c.attention_head_dim);
  cfg.require("in_channels", c.in_channels);
  cfg.require("out_channels", c.out_channels);
  cfg.require("text_dim", c.text_dim);
  cfg.require("freq_dim", c.freq_dim);
  cfg.require("ffn_dim", c.ffn_dim);
  cfg.require("num_layers", c.num_layers);
  cfg.read("cross_attn_norm", c.cross_attn_norm);
  cfg.read("qk_norm", c.qk_norm);
  cfg.read("eps", c.eps);
  cfg.read("rope_max_seq_len", c.rope_max_seq_len);
  for (const char* k : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"})
    if (j.contains(k) && !j[k].is_null())
      throw Error(std::string("transformer config: '") + k + "' = " + j[k].dump() +
                  " is not supported (the TI2V-5B model has none; the 14B image-to-video variant is not implemented)");
  if (c.qk_norm != "rms_norm_across_heads")
    throw Error("transformer config: qk_norm '" + c.qk_norm + "' is not supported (only rms_norm_across_heads)");
  if (c.patch_size.size() != 3) throw Error("transformer config: patch_size must have 3 entries");
  cfg.dimension("num_attention_heads", c.num_attention_heads);
  cfg.dimension("attention_head_dim", c.attention_head_dim);
  cfg.dimension("in_channels", c.in_channels);
  cfg.dimension("out_channels", c.out_channels);
  cfg.dimension("text_dim", c.text_dim);
  cfg.dimension("ffn_dim", c.ffn_dim);
  cfg.dimension("num_layers", c.num_layers, 10000);
  cfg.dimension("rope_max_seq_len", c.rope_max_seq_len);
  cfg.dimension("freq_dim", c.freq_dim);
  // Both factors are at most 2^24, so the product cannot overflow; the model width must be a width too.
  if (c.dim() > kMaxConfigDim)
    cfg.fail("num_attention_heads", "x attention_head_dim = " + std::to_string(c.dim()) +
                                        " is implausibly large (at most " + std::to_string(kMaxConfigDim) + ")");
  cfg.positive_finite("eps", c.eps);
  if (c.freq_dim % 2) throw Error("transformer config: 'freq_dim' must be positive and even");
  if (c.attention_head_dim % 2 || (c.attention_head_dim / 6) * 2 * 2 >= c.attention_head_dim)
    throw Error("transformer config: 'attention_head_dim' must be even and split into t/h/w rotary parts");
  for (auto p : c.patch_size) cfg.dimension("patch_size", p, 64);
  return c;
}

nlohmann::json WanTransformerConfig::to_json() const {
  return {{"_class_name", "WanTransformer3DModel"},
          {"patch_size", patch_size},
          {"num_attention_heads", num_attention_heads},
          {"attention_head_dim", attention_head_dim},
          {"in_channels", in_channels},
          {"out_channels", out_channels},
          {"text_dim", text_dim},
          {"freq_dim", freq_dim},
          {"ffn_dim", ffn_dim},
          {"num_layers", num_layers},
          {"cross_attn_norm", cross_attn_norm},
          {"qk_norm", qk_norm},
          {"eps", eps},
          {"image_dim", nullptr},
          {"added_kv_proj_dim", nullptr},
          {"rope_max_seq_len", rope_max_seq_len}};
}

// ---------------------------------------------------------------------------------------------------

WanAttentionImpl::WanAttentionImpl(int64_t dim, int64_t kv_dim, int64_t heads_in, double eps, const Precision& p)
    : heads(heads_in) {
  const auto o = p.compute_opts();
  to_q = register_module("to_q", Linear(dim, dim, true, o));
  to_k = register_module("to_k", Linear(kv_dim, dim, true, o));
  to_v = register_module("to_v", Linear(kv_dim, dim, true, o));
  auto to_out = register_module("to_out", List());
  to_out0 = to_out->add("0", Linear(dim, dim, true, o));
  norm_q = register_module("norm_q", RMSNorm(dim, eps, o));
  norm_k = register_module("norm_k", RMSNorm(dim, eps, o));
}

namespace {

// The overrides of this forward: resolved once by the transformer's forward; for a block or an attention
// called on its own, resolved here.
const ext::TransformerPoints& points_of(const ForwardContext* fc, std::optional<ext::TransformerPoints>& own) {
  if (fc && fc->points) return *fc->points;
  own = ext::TransformerPoints::resolve(fc ? fc->options : nullptr);
  return *own;
}

// lin(x) through the linear extension point.
at::Tensor linear_of(const ext::TransformerPoints& pts, const Linear& lin, const at::Tensor& x,
                     const ForwardContext* fc) {
  if (auto y = ext::first_taker(pts.linear, lin, x, fc)) return *y;
  return lin->forward(x);
}

}  // namespace

at::Tensor WanAttentionImpl::forward(const at::Tensor& x, const at::Tensor& ctx, const at::Tensor& rope_cos,
                                     const at::Tensor& rope_sin, const ForwardContext* fc, const void* ctx_key) const {
  const bool cross = ctx.defined();
  const at::Tensor& src = cross ? ctx : x;
  const auto B = x.size(0), L = x.size(1), S = src.size(1);
  std::optional<ext::TransformerPoints> own;
  const ext::TransformerPoints& pts = points_of(fc, own);
  auto linear = [&](const Linear& lin, const at::Tensor& in) {
    ProfileScope ps("gemm", [&] { return gemm_detail(in, lin->weight.size(0)); });
    return linear_of(pts, lin, in, fc);
  };
  at::Tensor q, k, v;
  bool normed_and_rotated = false;
  if (!cross) {
    if (auto qkv = ext::first_taker(pts.qkv, ext::QkvWeights{to_q, to_k, to_v, state}, x, fc)) {
      q = qkv->q, k = qkv->k, v = qkv->v;
    } else {
      q = linear(to_q, x);
      k = linear(to_k, x);
      v = linear(to_v, x);
    }
    if (rope_cos.defined() &&
        ext::first_taker(pts.qk_norm_rope, q, k, norm_q, norm_k, rope_cos, rope_sin, q.size(2) / heads, fc)) {
      normed_and_rotated = true;
    } else {
      ProfileScope ps("norm_elementwise", [&] {
        return ProfileDetail{"self q/k RMSNorm", 0, 4.0 * q.numel() * q.element_size()};
      });
      q = norm_q->forward(q);  // [B, L, D]; RMS over all heads' lanes
      k = norm_k->forward(k);
    }
  } else {
    q = linear(to_q, x);
    {
      ProfileScope ps("norm_elementwise", [&] {
        return ProfileDetail{"cross q RMSNorm", 0, 2.0 * q.numel() * q.element_size()};
      });
      q = norm_q->forward(q);  // [B, L, D]; RMS over all heads' lanes
    }
    const std::function<std::pair<at::Tensor, at::Tensor>()> project_kv = [&] {
      at::Tensor kk = linear(to_k, src);
      {
        ProfileScope ps("norm_elementwise");
        kk = norm_k->forward(kk);
      }
      return std::make_pair(kk, linear(to_v, src));  // [B, S, D] each
    };
    // Cross-attention K/V depend only on the prompt and the block.
    auto kv = ext::first_taker(pts.cross_kv, ctx_key, project_kv, fc);
    std::tie(k, v) = kv ? *kv : project_kv();
  }
  q = q.view({B, L, heads, -1});
  k = k.view({B, S, heads, -1});
  v = v.view({B, S, heads, -1});
  if (rope_cos.defined() && !normed_and_rotated) {
    ProfileScope ps("rope");
    q = apply_rope(q, rope_cos, rope_sin);
    k = apply_rope(k, rope_cos, rope_sin);
  }
  q = q.transpose(1, 2);  // [B, H, L, d]
  k = k.transpose(1, 2);
  v = v.transpose(1, 2);
  at::Tensor out;
  {
    ProfileScope ps("attention", [&] {
      return ProfileDetail{cross ? "cross" : "self",
                           4.0 * static_cast<double>(q.size(0)) * q.size(1) * q.size(2) * k.size(2) * q.size(3)};
    });
    const ext::SparseAttention* sparse = cross || !fc ? nullptr : pts.sparse_attention;
    if (sparse && sparse->engaged(*fc)) {
      if (fc->work) ++fc->work->sparse_self_attention;  // counted here, where the pattern is taken
      out = sparse->attend(q, k, v, *fc);
    } else {
      if (sparse) sparse->dense_call(q, *fc);
      auto a = ext::first_taker(pts.attention, q, k, v, fc);
      out = a ? *a : compat::sdpa(q, k, v);  // [B, H, L, d]
    }
  }
  {
    ProfileScope ps("layout");
    out = out.transpose(1, 2).reshape({B, L, -1}).to(q.scalar_type());  // [B, L, D]
  }
  return linear(to_out0, out);
}

WanBlockImpl::WanBlockImpl(const WanTransformerConfig& c, const Precision& p) : eps(c.eps) {
  const int64_t D = c.dim();
  attn1 = register_module("attn1", WanAttention(D, D, c.num_attention_heads, c.eps, p));
  attn2 = register_module("attn2", WanAttention(D, D, c.num_attention_heads, c.eps, p));
  if (!c.cross_attn_norm) throw Error("transformer config: cross_attn_norm false is not supported");
  norm2 = register_module("norm2", LayerNorm(D, c.eps, p.fp32_opts()));
  auto ffn = register_module("ffn", std::make_shared<torch::nn::Module>());
  auto net = ffn->register_module("net", List());
  auto gelu = net->add("0", std::make_shared<torch::nn::Module>());
  ffn_in = gelu->register_module("proj", Linear(D, c.ffn_dim, true, p.compute_opts()));
  ffn_out = net->add("2", Linear(c.ffn_dim, D, true, p.compute_opts()));
  scale_shift_table = add_param(*this, "scale_shift_table", {1, 6, D}, p.fp32_opts());
}

at::Tensor WanBlockImpl::modulated_input(const at::Tensor& x, const at::Tensor& tproj) const {
  const at::Tensor mod = tproj.dim() == 3 ? scale_shift_table + tproj.to(at::kFloat)
                                          : scale_shift_table.unsqueeze(0) + tproj.to(at::kFloat);
  return (layer_norm_fp32(x, eps) * (1 + mod_chunk(mod, 1)) + mod_chunk(mod, 0)).to(x.scalar_type());
}

at::Tensor WanBlockImpl::forward(const at::Tensor& x, const at::Tensor& ctx, const at::Tensor& tproj,
                                 const at::Tensor& rope_cos, const at::Tensor& rope_sin, const ForwardContext* fc,
                                 const void* ctx_key) const {
  const auto dt = x.scalar_type();
  std::optional<ext::TransformerPoints> own;
  const ext::TransformerPoints& pts = points_of(fc, own);
  // [1, 6, D] + [B, 6, D] -> [B, 6, D]; or [1, 1, 6, D] + [B, L, 6, D] -> [B, L, 6, D]; fp32. An override
  // reads the table and the projection directly, so the sum is made only for the reference ops.
  at::Tensor mod;
  auto chunk = [&](int64_t k) {
    if (!mod.defined()) {
      ProfileScope ps("norm_elementwise");
      mod = tproj.dim() == 3 ? scale_shift_table + tproj.to(at::kFloat)
                             : scale_shift_table.unsqueeze(0) + tproj.to(at::kFloat);
    }
    return mod_chunk(mod, k);
  };
  auto moved = [&](const char* what, int acts) {
    return [&x, &tproj, what, acts] { return ext::block_traffic(what, x, tproj, acts, 0); };
  };
  auto norm_modulate = [&](const at::Tensor& in, int k_shift, int k_scale) {
    if (auto y = ext::first_taker(pts.norm_modulate, in, scale_shift_table, tproj, k_shift, k_scale, eps, fc))
      return *y;
    const at::Tensor shift = chunk(k_shift), scale = chunk(k_scale);
    ProfileScope ps("norm_elementwise", moved("LayerNorm + modulation", 2));
    return (layer_norm_fp32(in, eps) * (1 + scale) + shift).to(dt);
  };
  auto gate_residual = [&](const at::Tensor& res, const at::Tensor& branch, int k_gate) {
    if (auto y = ext::first_taker(pts.gate_residual, res, branch, scale_shift_table, tproj, k_gate, fc)) return *y;
    const at::Tensor gate = chunk(k_gate);
    ProfileScope ps("norm_elementwise", moved("gate + residual", 3));
    return (res.to(at::kFloat) + branch.to(at::kFloat) * gate).to(dt);
  };

  at::Tensor h = norm_modulate(x, 0, 1);
  at::Tensor out = gate_residual(x, attn1->forward(h, {}, rope_cos, rope_sin, fc), 2);

  if (auto n = ext::first_taker(pts.affine_norm, out, norm2->weight, norm2->bias, norm2->eps, fc)) {
    h = *n;
  } else {
    ProfileScope ps("norm_elementwise", moved("norm2 LayerNorm + affine", 2));
    h = norm2->forward(out).to(dt);
  }
  const at::Tensor cross = attn2->forward(h, ctx, {}, {}, fc, ctx_key);
  if (auto r = ext::first_taker(pts.residual_norm_modulate, out, cross, scale_shift_table, tproj, 3, 4, eps, fc)) {
    std::tie(out, h) = *r;
  } else {
    {
      ProfileScope ps("norm_elementwise", moved("cross residual add", 3));
      out = out + cross;
    }
    h = norm_modulate(out, 3, 4);
  }
  return gate_residual(out, feed_forward(h, pts, fc), 5);
}

at::Tensor WanBlockImpl::feed_forward(const at::Tensor& h, const ext::TransformerPoints& pts,
                                      const ForwardContext* fc) const {
  if (auto ff = ext::first_taker(pts.ffn, ffn_in, ffn_out, h, fc)) return *ff;
  at::Tensor hidden;
  if (auto g = ext::first_taker(pts.linear_gelu, ffn_in, h, fc)) {
    hidden = *g;
  } else {
    {
      ProfileScope ps("gemm", [&] { return gemm_detail(h, ffn_in->weight.size(0)); });
      hidden = linear_of(pts, ffn_in, h, fc);
    }
    ProfileScope ps("norm_elementwise", [&] {
      return ProfileDetail{"FFN GELU", 0, 2.0 * hidden.numel() * hidden.element_size()};
    });
    hidden = gelu_tanh(hidden);
  }
  ProfileScope ps("gemm", [&] { return gemm_detail(hidden, ffn_out->weight.size(0)); });
  return linear_of(pts, ffn_out, hidden, fc);
}

// ---------------------------------------------------------------------------------------------------

WanTransformer3DModelImpl::WanTransformer3DModelImpl(const WanTransformerConfig& c, const Precision& p)
    : config_(c), precision_(p) {
  const int64_t D = c.dim();
  const auto o = p.compute_opts();
  patch_embedding = register_module("patch_embedding", Conv3d(c.in_channels, D, c.patch_size, o, c.patch_size));
  auto cond = register_module("condition_embedder", std::make_shared<torch::nn::Module>());
  auto time_embedder = cond->register_module("time_embedder", std::make_shared<torch::nn::Module>());
  time_linear_1 = time_embedder->register_module("linear_1", Linear(c.freq_dim, D, true, p.fp32_opts()));
  time_linear_2 = time_embedder->register_module("linear_2", Linear(D, D, true, p.fp32_opts()));
  time_proj = cond->register_module("time_proj", Linear(D, 6 * D, true, o));
  auto text_embedder = cond->register_module("text_embedder", std::make_shared<torch::nn::Module>());
  text_linear_1 = text_embedder->register_module("linear_1", Linear(c.text_dim, D, true, o));
  text_linear_2 = text_embedder->register_module("linear_2", Linear(D, D, true, o));
  blocks = register_module("blocks", List());
  for (int64_t i = 0; i < c.num_layers; ++i) block_list.push_back(blocks->add(std::to_string(i), WanBlock(c, p)));
  scale_shift_table = add_param(*this, "scale_shift_table", {1, 2, D}, p.fp32_opts());
  proj_out = register_module("proj_out",
                             Linear(D, c.out_channels * c.patch_size[0] * c.patch_size[1] * c.patch_size[2], true, o));

  // Rotary tables: head dim split into t/h/w parts; per axis of width a, angle(pos, j) = pos *
  // 10000^(-2j/a), in float64 like the reference, concatenated [t | h | w] along the pair index.
  const int64_t hd = c.attention_head_dim;
  const int64_t h_dim = 2 * (hd / 6), w_dim = h_dim, t_dim = hd - h_dim - w_dim;
  const at::Tensor pos = at::arange(c.rope_max_seq_len, at::kDouble);
  std::vector<at::Tensor> parts;
  for (int64_t a : {t_dim, h_dim, w_dim}) {
    const at::Tensor inv = 1.0 / at::pow(10000.0, at::arange(0, a, 2, at::kDouble).slice(0, 0, a / 2) / a);
    parts.push_back(at::outer(pos, inv));  // [max_seq_len, a/2]
  }
  rope_freqs_ = at::cat(parts, 1);  // [max_seq_len, hd/2]
}

std::pair<at::Tensor, at::Tensor> WanTransformer3DModelImpl::rope(int64_t f, int64_t h, int64_t w) const {
  const int64_t hd = config_.attention_head_dim;
  const int64_t h_dim = 2 * (hd / 6), t_dim = hd - 2 * h_dim;
  const int64_t nt = t_dim / 2, nh = h_dim / 2;
  if (f > config_.rope_max_seq_len || h > config_.rope_max_seq_len || w > config_.rope_max_seq_len)
    throw Error("transformer: latent grid exceeds rope_max_seq_len");
  const at::Tensor ft = rope_freqs_.slice(0, 0, f).slice(1, 0, nt).view({f, 1, 1, nt}).expand({f, h, w, nt});
  const at::Tensor fh = rope_freqs_.slice(0, 0, h).slice(1, nt, nt + nh).view({1, h, 1, nh}).expand({f, h, w, nh});
  const at::Tensor fw =
      rope_freqs_.slice(0, 0, w).slice(1, nt + nh, nt + 2 * nh).view({1, 1, w, nh}).expand({f, h, w, nh});
  const at::Tensor ang = at::cat({ft, fh, fw}, -1).reshape({f * h * w, hd / 2});  // [L, d/2] float64
  return {ang.cos().to(precision_.fp32_opts()), ang.sin().to(precision_.fp32_opts())};
}

at::Tensor WanTransformer3DModelImpl::time_sinusoid(const at::Tensor& t) const {
  // diffusers get_timestep_embedding(flip_sin_to_cos=True, downscale_freq_shift=0), in float32.
  const int64_t half = config_.freq_dim / 2;
  const at::Tensor exponent = at::arange(0, half, precision_.fp32_opts()) * (-std::log(10000.0)) / half;
  const at::Tensor args = t.to(precision_.fp32_opts()).unsqueeze(1) * exponent.exp().unsqueeze(0);  // [N, half]
  return at::cat({args.cos(), args.sin()}, -1);
}

std::pair<at::Tensor, at::Tensor> WanTransformer3DModelImpl::time_embedding(const at::Tensor& t) const {
  const at::Tensor temb =
      time_linear_2->forward(at::silu(time_linear_1->forward(time_sinusoid(t)))).to(precision_.compute);
  return {temb, time_proj->forward(at::silu(temb))};
}

at::Tensor WanTransformer3DModelImpl::forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& ctx,
                                              Intermediates* inter, const ForwardContext* fc_in) {
  const auto& c = config_;
  if (x.dim() != 5 || x.size(1) != c.in_channels)
    throw Error("transformer: hidden_states must be [B, " + std::to_string(c.in_channels) + ", F, H, W]");
  const int64_t B = x.size(0);
  const int64_t pt = c.patch_size[0], ph = c.patch_size[1], pw = c.patch_size[2];
  if (x.size(2) % pt || x.size(3) % ph || x.size(4) % pw)
    throw Error("transformer: latent frames/height/width must be multiples of the patch size");
  const int64_t F = x.size(2) / pt, H = x.size(3) / ph, W = x.size(4) / pw, L = F * H * W;
  if (ctx.dim() != 3 || ctx.size(0) != B || ctx.size(2) != c.text_dim)
    throw Error("transformer: encoder_hidden_states must be [B, S, " + std::to_string(c.text_dim) + "]");
  if (!((t.dim() == 1 && t.size(0) == B) || (t.dim() == 2 && t.size(0) == B && t.size(1) == L)))
    throw Error("transformer: timestep must be [B] or [B, " + std::to_string(L) + "] (one per token)");
  const Recorder record = [inter](const std::string& name, const at::Tensor& v) {
    if (inter) (*inter)[name] = v;
  };

  ForwardContext fc_local = fc_in ? *fc_in : ForwardContext{};
  const ForwardContext* fc = fc_in ? &fc_local : nullptr;
  fc_local.grid_f = F;
  fc_local.grid_h = H;
  fc_local.grid_w = W;
  // The overrides on for this forward, resolved once (the caller's, where it resolved them already).
  std::optional<ext::TransformerPoints> own;
  if (!fc_local.points) {
    own = ext::TransformerPoints::resolve(fc ? fc->options : nullptr);
    fc_local.points = &*own;
  }
  const ext::TransformerPoints& pts = *fc_local.points;
  const Conditioning cond = condition(t, ctx, F, H, W, pts, fc, record);
  const void* ctx_key = ctx.data_ptr();

  // The body: everything from here on runs on the device without the host deciding anything, so a
  // replay (cuda_graph) can capture and replay it (inputs: x, temb, tproj, text, cos, sin).
  auto body = [&](const std::vector<at::Tensor>& in, ForwardContext& bfc) -> at::Tensor {
    return forward_body(in, fc ? &bfc : nullptr, bfc, cond.per_token, ctx_key, record);
  };
  std::vector<at::Tensor> inputs{x, cond.temb, cond.tproj, cond.text, cond.cos, cond.sin};
  // A step cache that decides between blocks needs the host there: no replay of the body then.
  if (fc && fc->replay && !inter && !(fc->cache && fc->cache->hooks_blocks())) {
    const bool sparse_step = pts.sparse_attention && pts.sparse_attention->step_sparse(*fc);
    // One replay per shape, prompt (the cached K/V it reads) and attention phase (sparse steps differ).
    std::string key = std::to_string(reinterpret_cast<uintptr_t>(ctx_key)) + (sparse_step ? "/sparse" : "/dense") +
                      "/" + std::string(c10::toString(x.scalar_type())) + (cond.per_token ? "/tok" : "/sample");
    for (auto d : x.sizes()) key += "/" + std::to_string(d);
    for (auto d : ctx.sizes()) key += "/" + std::to_string(d);
    // A replay runs every block and takes the sparse path where the captured body did; the capture's
    // own run of the body is not counted (its replays are).
    WorkCount* work = fc_local.work;
    fc_local.work = nullptr;
    at::Tensor y = fc->replay->run(key, inputs, fc_local, body);
    if (work && fc->replay->computed_last()) {
      work->blocks += static_cast<int64_t>(block_list.size());
      for (int64_t i = 0; i < static_cast<int64_t>(block_list.size()); ++i) {
        fc_local.layer = i;
        if (pts.sparse_attention && pts.sparse_attention->engaged(fc_local)) ++work->sparse_self_attention;
      }
    }
    return y;
  }
  return body(inputs, fc_local);
}

WanTransformer3DModelImpl::Conditioning WanTransformer3DModelImpl::condition(const at::Tensor& t, const at::Tensor& ctx,
                                                                             int64_t F, int64_t H, int64_t W,
                                                                             const ext::TransformerPoints& pts,
                                                                             const ForwardContext* fc,
                                                                             const Recorder& record) const {
  const int64_t B = t.size(0), L = F * H * W;
  Conditioning c;
  // Time: [B] -> temb [B, D], tproj [B, 6, D]; per token: [B, L] -> [B, L, D], [B, L, 6, D].
  std::optional<ProfileScope> embed_scope(std::in_place, "time_text_embedding", [] { return ProfileDetail{"time"}; });
  const auto t_sample = ext::first_taker(pts.timesteps, t, fc);
  const at::Tensor& tt = t_sample ? *t_sample : t;
  c.per_token = tt.dim() == 2;
  const std::function<ext::TimeEmbedding(const at::Tensor&)> embed = [this](const at::Tensor& u) {
    return time_embedding(u);
  };
  auto emb = ext::first_taker(pts.time_embedding, tt.reshape({-1}), embed, fc);
  std::tie(c.temb, c.tproj) = emb ? *emb : time_embedding(tt.reshape({-1}));
  if (c.per_token) {
    c.temb = c.temb.view({B, L, -1});
    c.tproj = c.tproj.view({B, L, -1});
  }
  record("condition_embedder.out0", c.temb);
  record("condition_embedder.out1", c.tproj);
  c.tproj = c.per_token ? c.tproj.unflatten(2, {6, -1}) : c.tproj.unflatten(1, {6, -1});
  // The projected text depends only on the prompt.
  embed_scope.reset();
  embed_scope.emplace("time_text_embedding", [] { return ProfileDetail{"text"}; });
  const std::function<at::Tensor()> project_text = [&] {
    return text_linear_2->forward(gelu_tanh(text_linear_1->forward(ctx)));  // [B, S, D]
  };
  auto text = ext::first_taker(pts.text_projection, static_cast<const void*>(ctx.data_ptr()), project_text, fc);
  c.text = text ? *text : project_text();
  record("condition_embedder.out2", c.text);
  embed_scope.reset();
  embed_scope.emplace("time_text_embedding", [] { return ProfileDetail{"rope tables"}; });
  const std::function<std::pair<at::Tensor, at::Tensor>()> tables = [&] { return rope(F, H, W); };
  auto cs = ext::first_taker(pts.rope_tables, technique_state_, F, H, W, tables, fc);
  std::tie(c.cos, c.sin) = cs ? *cs : tables();
  return c;
}

at::Tensor WanTransformer3DModelImpl::forward_body(const std::vector<at::Tensor>& in, ForwardContext* fcb,
                                                   ForwardContext& bfc, bool per_token, const void* ctx_key,
                                                   const Recorder& record) {
  const auto& c = config_;
  const at::Tensor &bx = in[0], &btemb = in[1], &btproj = in[2], &btext = in[3], &bcos = in[4], &bsin = in[5];
  const int64_t B = bx.size(0), pt = c.patch_size[0], ph = c.patch_size[1], pw = c.patch_size[2];
  const int64_t F = bx.size(2) / pt, H = bx.size(3) / ph, W = bx.size(4) / pw;
  at::Tensor h;
  {
    ProfileScope ps("gemm");
    h = patch_embedding->forward(bx);  // [B, D, F, H, W]
  }
  record("patch_embedding.out", h);
  {
    ProfileScope ps("layout");
    h = h.flatten(2).transpose(1, 2).contiguous();  // [B, L, D], tokens f-major then h then w
  }
  BlockStack stack;
  stack.layers = static_cast<int64_t>(block_list.size());
  stack.block = [&](int64_t i, const at::Tensor& hi) {
    bfc.layer = i;
    if (bfc.work) ++bfc.work->blocks;  // counted here, where the block runs, whatever decided to run it
    at::Tensor ho = block_list[static_cast<size_t>(i)]->forward(hi, btext, btproj, bcos, bsin, fcb, ctx_key);
    record("blocks." + std::to_string(i) + ".out", ho);
    return ho;
  };
  stack.modulated_input = [&](const at::Tensor& hi) { return block_list[0]->modulated_input(hi, btproj); };
  // A step cache of the generation may reuse the stack's cached residual instead.
  h = fcb && fcb->cache ? fcb->cache->blocks(stack, h, fcb->step, fcb->branch) : run_blocks(stack, h, 0, stack.layers);
  // Head: shift/scale = table + temb (not tproj), per sample or per token.
  const at::Tensor mod = per_token ? scale_shift_table.unsqueeze(0) + btemb.unsqueeze(2).to(at::kFloat)
                                   : scale_shift_table + btemb.unsqueeze(1).to(at::kFloat);
  {
    ProfileScope ps("norm_elementwise");
    const at::Tensor normed = layer_norm_fp32(h, c.eps);
    record("norm_out.out", normed);
    h = (normed * (1 + mod_chunk(mod, 1)) + mod_chunk(mod, 0)).to(precision_.compute);
  }
  {
    ProfileScope ps("gemm");
    h = proj_out->forward(h);  // [B, L, pt*ph*pw*Cout]
  }
  record("proj_out.out", h);
  // Unpatchify: feature ((it*ph + ih)*pw + iw)*Cout + c -> out[b, c, f*pt+it, h*ph+ih, w*pw+iw].
  ProfileScope ps("layout");
  h = h.reshape({B, F, H, W, pt, ph, pw, c.out_channels});
  return h.permute({0, 7, 1, 4, 2, 5, 3, 6}).reshape({B, c.out_channels, F * pt, H * ph, W * pw});
}

}  // namespace autooptim::runtime
