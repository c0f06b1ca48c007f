#include "runtime/umt5.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/config_json.h"
#include "base/error.h"
#include "runtime/tokenizer.h"
#include "runtime/verify.h"

namespace autooptim::runtime {
namespace {

// A child module that only groups others (transformers' T5LayerSelfAttention, T5LayerFF, ...).
std::shared_ptr<torch::nn::Module> group(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

}  // namespace

UMT5Config UMT5Config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("umt5 config: not a JSON object");
  UMT5Config c;
  const ConfigReader cfg(j, "umt5");
  cfg.require("vocab_size", c.vocab_size);
  cfg.require("d_model", c.d_model);
  cfg.require("d_kv", c.d_kv);
  cfg.require("d_ff", c.d_ff);
  cfg.require("num_layers", c.num_layers);
  cfg.require("num_heads", c.num_heads);
  cfg.read("relative_attention_num_buckets", c.relative_attention_num_buckets);
  cfg.read("relative_attention_max_distance", c.relative_attention_max_distance);
  cfg.read("layer_norm_epsilon", c.layer_norm_epsilon);
  cfg.read("feed_forward_proj", c.feed_forward_proj);
  if (c.feed_forward_proj != "gated-gelu")
    throw Error("umt5 config: feed_forward_proj '" + c.feed_forward_proj +
                "' is not supported (only gated-gelu, as umt5)");
  cfg.dimension("vocab_size", c.vocab_size);
  cfg.dimension("d_model", c.d_model);
  cfg.dimension("d_kv", c.d_kv);
  cfg.dimension("d_ff", c.d_ff);
  cfg.dimension("num_layers", c.num_layers, 10000);
  cfg.dimension("num_heads", c.num_heads);
  cfg.dimension("relative_attention_num_buckets", c.relative_attention_num_buckets);
  cfg.dimension("relative_attention_max_distance", c.relative_attention_max_distance);
  if (c.inner_dim() > kMaxConfigDim)
    cfg.fail("num_heads", "x d_kv = " + std::to_string(c.inner_dim()) + " is implausibly large (at most " +
                              std::to_string(kMaxConfigDim) + ")");
  cfg.positive_finite("layer_norm_epsilon", c.layer_norm_epsilon);
  if (c.relative_attention_num_buckets < 4 || c.relative_attention_num_buckets % 4)
    throw Error("umt5 config: 'relative_attention_num_buckets' must be a positive multiple of 4");
  if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 4)
    throw Error("umt5 config: 'relative_attention_max_distance' must exceed num_buckets / 4");
  return c;
}

nlohmann::json UMT5Config::to_json() const {
  return {{"architectures", {"UMT5EncoderModel"}},
          {"model_type", "umt5"},
          {"vocab_size", vocab_size},
          {"d_model", d_model},
          {"d_kv", d_kv},
          {"d_ff", d_ff},
          {"num_layers", num_layers},
          {"num_heads", num_heads},
          {"relative_attention_num_buckets", relative_attention_num_buckets},
          {"relative_attention_max_distance", relative_attention_max_distance},
          {"layer_norm_epsilon", layer_norm_epsilon},
          {"feed_forward_proj", feed_forward_proj},
          {"dense_act_fn", "gelu_new"},
          {"is_gated_act", true},
          {"pad_token_id", 0},
          {"eos_token_id", 1}};
}

at::Tensor relative_position_bucket(const at::Tensor& rel, int64_t num_buckets, int64_t max_distance) {
  const int64_t half = num_buckets / 2;  // per sign
  const int64_t max_exact = half / 2;    // distances below this are their own bucket
  const at::Tensor offset = (rel > 0).to(at::kLong) * half;
  const at::Tensor n = rel.abs();
  // float32 like transformers, so the bucket edges (e.g. n = 16, 64) fall where the reference puts them.
  at::Tensor large = at::log(n.to(at::kFloat) / static_cast<double>(max_exact)) /
                     std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                     static_cast<double>(half - max_exact);
  large = (large.to(at::kLong) + max_exact).clamp_max(half - 1);
  return offset + at::where(n < max_exact, n, large);
}

// ---------------------------------------------------------------------------------------------------

UMT5AttentionImpl::UMT5AttentionImpl(const UMT5Config& c, const Precision& p)
    : heads(c.num_heads),
      d_kv(c.d_kv),
      num_buckets(c.relative_attention_num_buckets),
      max_distance(c.relative_attention_max_distance) {
  const auto opts = p.compute_opts();
  const int64_t inner = c.inner_dim();
  q = register_module("q", Linear(c.d_model, inner, false, opts));
  k = register_module("k", Linear(c.d_model, inner, false, opts));
  v = register_module("v", Linear(c.d_model, inner, false, opts));
  o = register_module("o", Linear(inner, c.d_model, false, opts));
  auto bias = group(*this, "relative_attention_bias");
  relative_attention_bias = add_param(*bias, "weight", {num_buckets, heads}, opts);
}

at::Tensor UMT5AttentionImpl::position_bias(int64_t s) const {
  const auto dev = relative_attention_bias.device();
  const at::Tensor pos = at::arange(s, at::TensorOptions().dtype(at::kLong).device(dev));
  const at::Tensor rel = pos.unsqueeze(0) - pos.unsqueeze(1);  // [S_q, S_k] = key - query
  const at::Tensor buckets = relative_position_bucket(rel, num_buckets, max_distance);
  const at::Tensor table = relative_attention_bias.to(at::kFloat);       // [num_buckets, H]
  return at::embedding(table, buckets).permute({2, 0, 1}).unsqueeze(0);  // [1, H, S, S]
}

at::Tensor UMT5AttentionImpl::forward(const at::Tensor& x, const at::Tensor& mask_bias) const {
  const auto B = x.size(0), S = x.size(1);
  const at::Tensor qh = q->forward(x).view({B, S, heads, d_kv}).transpose(1, 2);  // [B, H, S, d]
  const at::Tensor kh = k->forward(x).view({B, S, heads, d_kv}).transpose(1, 2);  // [B, H, S, d]
  const at::Tensor vh = v->forward(x).view({B, S, heads, d_kv}).transpose(1, 2);  // [B, H, S, d]
  // T5 does not scale the scores by 1/sqrt(d); bias and mask are added and the softmax taken in fp32.
  at::Tensor scores = at::matmul(qh, kh.transpose(-1, -2)).to(at::kFloat);  // [B, H, S, S]
  scores = scores + position_bias(S) + mask_bias;
  const at::Tensor attn = at::softmax(scores, -1).to(vh.scalar_type());
  const at::Tensor out = at::matmul(attn, vh).transpose(1, 2).reshape({B, S, heads * d_kv});  // [B, S, H*d]
  return o->forward(out);
}

UMT5BlockImpl::UMT5BlockImpl(const UMT5Config& c, const Precision& p) {
  auto layer = register_module("layer", List());
  auto attn_layer = layer->add("0", std::make_shared<torch::nn::Module>());
  self_attention = attn_layer->register_module("SelfAttention", UMT5Attention(c, p));
  attn_norm = attn_layer->register_module("layer_norm", RMSNorm(c.d_model, c.layer_norm_epsilon, p.compute_opts()));
  auto ff_layer = layer->add("1", std::make_shared<torch::nn::Module>());
  auto dense = group(*ff_layer, "DenseReluDense");
  wi_0 = dense->register_module("wi_0", Linear(c.d_model, c.d_ff, false, p.compute_opts()));
  wi_1 = dense->register_module("wi_1", Linear(c.d_model, c.d_ff, false, p.compute_opts()));
  wo = dense->register_module("wo", Linear(c.d_ff, c.d_model, false, p.compute_opts()));
  ffn_norm = ff_layer->register_module("layer_norm", RMSNorm(c.d_model, c.layer_norm_epsilon, p.compute_opts()));
}

at::Tensor UMT5BlockImpl::forward(const at::Tensor& x, const at::Tensor& mask_bias) const {
  at::Tensor h = x + self_attention->forward(attn_norm->forward(x), mask_bias);  // [B, S, D]
  const at::Tensor n = ffn_norm->forward(h);
  const at::Tensor ff = wo->forward(gelu_tanh(wi_0->forward(n)) * wi_1->forward(n));  // gated-gelu, [B, S, D]
  return h + ff;
}

UMT5EncoderModelImpl::UMT5EncoderModelImpl(const UMT5Config& c, const Precision& p) : config_(c), precision_(p) {
  auto shared = group(*this, "shared");
  shared_weight = add_param(*shared, "weight", {c.vocab_size, c.d_model}, p.compute_opts());
  encoder = group(*this, "encoder");
  auto blocks = encoder->register_module("block", List());
  for (int64_t i = 0; i < c.num_layers; ++i) block_list.push_back(blocks->add(std::to_string(i), UMT5Block(c, p)));
  final_layer_norm =
      encoder->register_module("final_layer_norm", RMSNorm(c.d_model, c.layer_norm_epsilon, p.compute_opts()));
}

at::Tensor UMT5EncoderModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                         Intermediates* inter) {
  if (input_ids.dim() != 2) throw Error("umt5: input_ids must be [B, S]");
  if (attention_mask.sizes() != input_ids.sizes())
    throw Error("umt5: attention_mask must have input_ids' shape [B, S]");
  const auto dev = precision_.device;
  const at::Tensor ids = input_ids.to(dev, at::kLong);
  if (ids.numel() > 0) {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    if (lo < 0 || hi >= config_.vocab_size)
      throw Error("umt5: token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary [0, " +
                  std::to_string(config_.vocab_size) + ")");
  }
  auto record = [inter](const std::string& name, const at::Tensor& v) {
    if (inter) (*inter)[name] = v;
  };
  // Pads get the fp32 minimum: added to fp32 scores it stays finite, and exp() makes it exactly 0.
  const at::Tensor mask_bias = (1.0 - attention_mask.to(dev, at::kFloat)).view({ids.size(0), 1, 1, ids.size(1)}) *
                               std::numeric_limits<float>::lowest();  // [B, 1, 1, S]

  at::Tensor h = at::embedding(shared_weight, ids);  // [B, S, D], not scaled
  record("hidden_states.0", h);
  for (size_t i = 0; i < block_list.size(); ++i) {
    h = block_list[i]->forward(h, mask_bias);
    if (i + 1 < block_list.size()) record("hidden_states." + std::to_string(i + 1), h);
  }
  h = final_layer_norm->forward(h);
  record("hidden_states." + std::to_string(block_list.size()), h);
  return h;
}

// ---------------------------------------------------------------------------------------------------

void load_umt5(UMT5EncoderModel& m, const TensorSource& src) {
  if (src.contains("shared.weight") || !src.contains(kUMT5TiedEmbedding)) {
    LoadOptions o;
    o.ignore_unexpected = {kUMT5TiedEmbedding};
    load_strict(*m, src, o);
    return;
  }
  // Only the tied copy: load the encoder strictly, then the embedding from encoder.embed_tokens.
  const auto want = m->shared_weight.sizes().vec();
  if (src.shape(kUMT5TiedEmbedding) != want)
    throw CheckpointError(src.label() + ": " + kUMT5TiedEmbedding + " has the wrong shape for shared.weight");
  if (!dtype_loads_into(src.dtype(kUMT5TiedEmbedding), m->shared_weight.scalar_type()))
    throw CheckpointError(src.label() + ": " + kUMT5TiedEmbedding + " has dtype " + src.dtype_name(kUMT5TiedEmbedding) +
                          ", not a floating type for shared.weight");
  LoadOptions o;
  o.prefix = "encoder.";
  o.ignore_unexpected = {kUMT5TiedEmbedding};
  load_strict(*m->encoder, src, o);
  at::NoGradGuard no_grad;
  m->shared_weight.copy_(src.tensor(kUMT5TiedEmbedding));
}

at::Tensor encode_prompts(UMT5EncoderModel& m, const Tokenizer& tok, const std::vector<std::string>& prompts,
                          int64_t max_length, at::ScalarType dtype, bool trim, int64_t* tokens_saved) {
  const TokenizedPrompts t = tokenize_prompts(tok, prompts, max_length);
  at::InferenceMode guard;
  const auto dev = m->precision().device;
  int64_t len = max_length;
  if (trim) {
    len = 1;
    for (const int64_t l : t.lengths) len = std::max(len, l);
  }
  if (tokens_saved) *tokens_saved = static_cast<int64_t>(prompts.size()) * (max_length - len);
  const at::Tensor mask = t.attention_mask.narrow(1, 0, len).to(dev);
  const at::Tensor h = m->forward(t.input_ids.narrow(1, 0, len).to(dev), mask);  // [B, len, D]
  // Rows past each prompt's length (EOS included) become exact zeros, whatever the encoder put there.
  const at::Tensor out = h.masked_fill(mask.eq(0).unsqueeze(-1), 0).to(dtype);
  return len == max_length ? out : at::constant_pad_nd(out, {0, 0, 0, max_length - len});
}

// ---------------------------------------------------------------------------------------------------

void verify_umt5(const GoldenPair& p, const VerifyOptions& o, VerifyReport& rep) {
  const auto wj = read_json_file(p.weights_json);
  if (!wj.contains("config")) throw CheckpointError(p.weights_json + ": no 'config' object");
  UMT5EncoderModel model(with_config_file(p.weights_json, [&] { return UMT5Config::from_json(wj["config"]); }),
                         o.precision);
  load_umt5(model, TensorSource::open(p.weights));
  const auto io = TensorSource::open(p.io);
  Intermediates inter;
  at::InferenceMode guard;
  const at::Tensor out = model->forward(io.tensor("input_ids"), io.tensor("attention_mask"), &inter);
  rep.rows.push_back(compare(p.name, "last_hidden_state", out, io.tensor("last_hidden_state"), o.tolerance));
  for (const auto& name : io.names()) {
    if (name.rfind("inter.", 0) != 0) continue;
    auto it = inter.find(name.substr(6));
    if (it == inter.end()) {
      rep.rows.push_back({p.name, name, std::numeric_limits<double>::infinity(), 0, o.tolerance, false});
      continue;
    }
    rep.rows.push_back(compare(p.name, name, it->second, io.tensor(name), o.tolerance));
  }
}

}  // namespace autooptim::runtime
