// UMT5EncoderModel against the reference's golden vectors (float32, CPU, 1e-5 relative L2), the
// relative-position buckets, the full-size parameter count, and the prompt path: cleaning, the
// SentencePiece tokenizer (assets/wan22-tiny/spiece.model), padding/truncation and encode_prompts.
#include <gtest/gtest.h>

#include <algorithm>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/tokenizer.h"
#include "runtime/umt5.h"
#include "runtime/verify.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::runtime;

namespace {

UMT5Config golden_config() {
  return UMT5Config::from_json(read_json_file(test::golden_dir() + "/umt5_tiny_weights.json")["config"]);
}

TensorSource golden_weights() { return TensorSource::open(test::golden_dir() + "/umt5_tiny_weights.safetensors"); }
TensorSource golden_io() { return TensorSource::open(test::golden_dir() + "/umt5_tiny_io.safetensors"); }

UMT5EncoderModel load_golden_model(const Precision& p = {}) {
  UMT5EncoderModel m(golden_config(), p);
  load_umt5(m, golden_weights());
  return m;
}

std::string tiny_spiece() { return std::string(AUTOOPTIM_SOURCE_DIR) + "/assets/wan22-tiny/spiece.model"; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void fill_random(torch::nn::Module& m, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::NoGradGuard g;
  for (auto& p : m.parameters()) p.normal_(0.0, 0.3, gen);
}

// The golden-config encoder sized to the tiny tokenizer's vocabulary, with seeded random weights: what
// encode_prompts runs in the tests below.
struct TinyTextEncoder {
  Tokenizer tok = Tokenizer::load(tiny_spiece());
  UMT5Config config = [this] {
    UMT5Config c = golden_config();
    c.vocab_size = tok.vocab_size();
    return c;
  }();
  UMT5EncoderModel m{config};
  explicit TinyTextEncoder(uint64_t seed) { fill_random(*m, seed); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Model

TEST(UMT5, ParameterNamesAreTheCheckpointKeys) {
  UMT5EncoderModel m(golden_config());
  const auto src = golden_weights();
  std::vector<std::string> expected;
  for (const auto& n : src.names())
    if (n != kUMT5TiedEmbedding) expected.push_back(n);
  std::vector<std::string> ours;
  for (const auto& kv : parameter_shapes(*m)) ours.push_back(kv.first);
  EXPECT_EQ(ours, expected);
  for (const auto& kv : parameter_shapes(*m)) EXPECT_EQ(kv.second, src.shape(kv.first)) << kv.first;
}

TEST(UMT5, XxlConfigHasTheExpectedParameterCount) {
  // By hand from the shapes: shared 256384*4096; per layer q,k,v,o 4*4096*4096, relative bias 32*64,
  // two norms 2*4096, wi_0/wi_1/wo 3*10240*4096; 24 layers; final norm 4096.
  const int64_t per_layer = 4LL * 4096 * 4096 + 32 * 64 + 2 * 4096 + 3LL * 10240 * 4096;
  const int64_t expected = 256384LL * 4096 + 24 * per_layer + 4096;
  EXPECT_EQ(expected, 5680910336LL);
  UMT5EncoderModel m(UMT5Config::umt5_xxl(), Precision{at::kBFloat16, at::kCPU});
  int64_t n = 0;
  size_t tensors = 0;
  for (const auto& p : m->parameters()) {
    n += p.numel();
    ++tensors;
    EXPECT_EQ(p.scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(n, expected);
  EXPECT_EQ(tensors, 1u + 24u * 10u + 1u);
  const auto shapes = parameter_shapes(*m);
  EXPECT_EQ(shapes.at("shared.weight"), (std::vector<int64_t>{256384, 4096}));
  EXPECT_EQ(shapes.at("encoder.block.23.layer.0.SelfAttention.relative_attention_bias.weight"),
            (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shapes.at("encoder.block.23.layer.1.DenseReluDense.wo.weight"), (std::vector<int64_t>{4096, 10240}));
}

TEST(UMT5, ConfigRoundTripsAndRejectsOtherFeedForwards) {
  const auto c = UMT5Config::from_json(UMT5Config::umt5_xxl().to_json());
  EXPECT_EQ(c.vocab_size, 256384);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.d_ff, 10240);
  EXPECT_DOUBLE_EQ(c.layer_norm_epsilon, 1e-6);
  auto j = UMT5Config::umt5_xxl().to_json();
  j["feed_forward_proj"] = "relu";
  EXPECT_THROW(UMT5Config::from_json(j), Error);
  j = UMT5Config::umt5_xxl().to_json();
  j["d_model"] = "big";
  EXPECT_THROW(UMT5Config::from_json(j), Error);
}

TEST(UMT5, RelativePositionBucketsByHand) {
  // rel = key - query; 32 buckets (16 per sign, +16 for rel > 0), exact below 8, then
  // 8 + floor(ln(n/8) / ln(16) * 8) capped at 15.
  const std::vector<std::pair<int64_t, int64_t>> cases = {{0, 0},     {-1, 1},    {1, 17},    {-7, 7},    {7, 23},
                                                          {-8, 8},    {-11, 8},   {-12, 9},   {-20, 10},  {30, 27},
                                                          {-100, 15}, {-128, 15}, {1000, 31}, {-1000, 15}};
  std::vector<int64_t> rel;
  for (const auto& c : cases) rel.push_back(c.first);
  const at::Tensor b = relative_position_bucket(at::tensor(rel, at::kLong), 32, 128);
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(b[static_cast<int64_t>(i)].item<int64_t>(), cases[i].second) << "rel " << cases[i].first;
}

TEST(UMT5, GoldenOutputAndEveryIntermediate) {
  auto m = load_golden_model();
  const auto io = golden_io();
  Intermediates inter;
  at::InferenceMode guard;
  const at::Tensor out = m->forward(io.tensor("input_ids"), io.tensor("attention_mask"), &inter);
  const double e = rel_l2(out, io.tensor("last_hidden_state"));
  EXPECT_LE(e, 1e-5);
  std::cout << "last_hidden_state rel_l2 " << e << "\n";
  int checked = 0;
  for (const auto& name : io.names()) {
    if (name.rfind("inter.", 0) != 0) continue;
    const std::string key = name.substr(6);
    ASSERT_TRUE(inter.count(key)) << key;
    const double ei = rel_l2(inter.at(key), io.tensor(name));
    EXPECT_LE(ei, 1e-5) << key;
    std::cout << key << " rel_l2 " << ei << "\n";
    ++checked;
  }
  EXPECT_EQ(checked, golden_config().num_layers + 1);
}

TEST(UMT5, VerifierListsPassingRows) {
  GoldenPair p{"umt5_tiny", test::golden_dir() + "/umt5_tiny_weights.json",
               test::golden_dir() + "/umt5_tiny_weights.safetensors", test::golden_dir() + "/umt5_tiny_io.json",
               test::golden_dir() + "/umt5_tiny_io.safetensors"};
  VerifyReport rep;
  verify_umt5(p, VerifyOptions{}, rep);
  EXPECT_EQ(rep.rows.size(), 4u);
  EXPECT_TRUE(rep.all_pass());
}

TEST(UMT5, BrokenWeightFailsTheGoldenCheck) {
  const auto io = golden_io();
  for (const char* key : {"encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight",
                          "encoder.block.0.layer.1.layer_norm.weight", "encoder.final_layer_norm.weight"}) {
    auto m = load_golden_model();
    {
      at::NoGradGuard g;
      for (auto& p : m->named_parameters())
        if (p.key() == key) p.value().mul_(1.05);
    }
    at::InferenceMode guard;
    const at::Tensor out = m->forward(io.tensor("input_ids"), io.tensor("attention_mask"));
    EXPECT_GT(rel_l2(out, io.tensor("last_hidden_state")), 1e-4) << key;
  }
}

TEST(UMT5, LoadsFromTheTiedCopyAlone) {
  const auto src = golden_weights();
  std::map<std::string, at::Tensor> tensors;
  for (const auto& n : src.names())
    if (n != "shared.weight") tensors[n] = src.tensor(n);
  UMT5EncoderModel m(golden_config());
  load_umt5(m, TensorSource::from_tensors(tensors, "tied-only"));
  const auto io = golden_io();
  at::InferenceMode guard;
  EXPECT_LE(rel_l2(m->forward(io.tensor("input_ids"), io.tensor("attention_mask")), io.tensor("last_hidden_state")),
            1e-5);
  // Without either embedding the strict loader names what is missing.
  tensors.erase(kUMT5TiedEmbedding);
  UMT5EncoderModel m2(golden_config());
  EXPECT_THROW(load_umt5(m2, TensorSource::from_tensors(tensors, "no-embedding")), CheckpointError);
}

TEST(UMT5, PadsDoNotChangeTheRealRows) {
  // Row 1 of the golden batch is padded after 17 tokens: its first 17 outputs must not depend on
  // what the pad positions hold.
  auto m = load_golden_model();
  const auto io = golden_io();
  at::Tensor ids = io.tensor("input_ids").clone();
  const at::Tensor mask = io.tensor("attention_mask");
  at::InferenceMode guard;
  const at::Tensor a = m->forward(ids, mask);
  ids[1].slice(0, 17).fill_(5);
  const at::Tensor b = m->forward(ids, mask);
  EXPECT_LE(rel_l2(b[1].slice(0, 0, 17), a[1].slice(0, 0, 17)), 1e-6);
  EXPECT_THROW(m->forward(at::full({1, 4}, 300, at::kLong), at::ones({1, 4}, at::kLong)), Error);
}

TEST(UMT5, Bfloat16Runs) {
  auto m = load_golden_model(Precision{at::kBFloat16, at::kCPU});
  const auto io = golden_io();
  at::InferenceMode guard;
  const at::Tensor out = m->forward(io.tensor("input_ids"), io.tensor("attention_mask"));
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  const double e = rel_l2(out, io.tensor("last_hidden_state"));
  std::cout << "bf16 rel_l2 " << e << "\n";
  EXPECT_LE(e, 2e-2);
}

// ---------------------------------------------------------------------------------------------------
// Prompt cleaning and tokenizer

TEST(CleanPrompt, UnescapesTwiceAndCollapsesWhitespace) {
  EXPECT_EQ(clean_prompt("Tom &amp;amp; Jerry"), "Tom & Jerry");
  EXPECT_EQ(clean_prompt("&amp;lt;b&amp;gt;bold&amp;lt;/b&amp;gt;"), "<b>bold</b>");
  EXPECT_EQ(clean_prompt("  a\t\tb\n\n c  \r\n"), "a b c");
  EXPECT_EQ(clean_prompt("caf&eacute; &#39;quoted&#x27; &quot;x&quot;"), "caf\u00e9 'quoted' \"x\"");
  EXPECT_EQ(clean_prompt("a&nbsp;&nbsp;b"), "a b");        // U+00A0 is whitespace to Python's \s
  EXPECT_EQ(clean_prompt("a\u3000\u2003b\u00a0"), "a b");  // ideographic and em spaces too
  EXPECT_EQ(clean_prompt("5 &lt 6 &amp 7"), "5 < 6 & 7");  // legacy names need no ';'
  EXPECT_EQ(clean_prompt("&hellip &unknown; &#128;"), "&hellip &unknown; \u20ac");
  EXPECT_EQ(clean_prompt("&ampx &# &#x;"), "&x &# &#x;");
  EXPECT_EQ(clean_prompt("&#0;&#xD800;&#1;"), "\ufffd\ufffd");
  EXPECT_EQ(clean_prompt("   "), "");
  EXPECT_EQ(clean_prompt("no change."), "no change.");
}

TEST(Tokenizer, TinyModelFollowsT5Conventions) {
  const auto tok = Tokenizer::load(tiny_spiece());
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  const auto ids = tok.encode("A golden retriever runs across a snowy mountain ridge at sunset.");
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids.back(), 1);
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    EXPECT_GE(ids[i], 3);  // no pad, eos or unk inside a sentence from the corpus' alphabet
    EXPECT_LT(ids[i], tok.vocab_size());
  }
  EXPECT_EQ(tok.encode(""), (std::vector<int64_t>{1}));
  // from_serialized gives the same tokenizer as load.
  EXPECT_EQ(Tokenizer::from_serialized(read_all(tiny_spiece())).encode("a cat"), tok.encode("a cat"));
}

TEST(Tokenizer, PadTruncateMaskAndLengths) {
  const auto tok = Tokenizer::load(tiny_spiece());
  const std::string long_prompt = "A chef in a busy kitchen dances gracefully in a field of sunflowers. Slow motion.";
  const auto full = tok.encode(clean_prompt(long_prompt));
  const auto short_ids = tok.encode("A cat");
  ASSERT_GT(full.size(), 12u);
  const auto t = tokenize_prompts(tok, {"  A   cat ", long_prompt, ""}, 12);
  EXPECT_EQ(t.input_ids.sizes(), (at::IntArrayRef{3, 12}));
  EXPECT_EQ(t.attention_mask.sizes(), (at::IntArrayRef{3, 12}));
  EXPECT_EQ(t.input_ids.scalar_type(), at::kLong);
  ASSERT_EQ(t.lengths, (std::vector<int64_t>{static_cast<int64_t>(short_ids.size()), 12, 1}));
  for (int64_t i = 0; i < 12; ++i) {
    const int64_t id0 = t.input_ids[0][i].item<int64_t>();
    EXPECT_EQ(id0, i < t.lengths[0] ? short_ids[i] : 0);
    EXPECT_EQ(t.attention_mask[0][i].item<int64_t>(), i < t.lengths[0] ? 1 : 0);
    // Truncated: the first 11 pieces, then </s>.
    EXPECT_EQ(t.input_ids[1][i].item<int64_t>(), i < 11 ? full[i] : 1);
    EXPECT_EQ(t.attention_mask[1][i].item<int64_t>(), 1);
    EXPECT_EQ(t.input_ids[2][i].item<int64_t>(), i == 0 ? 1 : 0);
    EXPECT_EQ(t.attention_mask[2][i].item<int64_t>(), i == 0 ? 1 : 0);
  }
  EXPECT_THROW(tokenize_prompts(tok, {"a"}, 0), Error);
}

TEST(Tokenizer, MissingOrCorruptModelIsAnError) {
  test::TempDir dir;
  EXPECT_THROW(Tokenizer::load(dir.file("spiece.model")), Error);
  EXPECT_THROW(Tokenizer::load(dir.path().string()), Error);
  test::write_bytes(dir.file("garbage.model"), "this is not a sentencepiece model\n");
  EXPECT_THROW(Tokenizer::load(dir.file("garbage.model")), Error);
  const std::string bytes = read_all(tiny_spiece());
  test::write_bytes(dir.file("truncated.model"), bytes.substr(0, bytes.size() / 3));
  EXPECT_THROW(Tokenizer::load(dir.file("truncated.model")), Error);
  test::write_bytes(dir.file("empty.model"), "");
  EXPECT_THROW(Tokenizer::load(dir.file("empty.model")), Error);
  EXPECT_THROW(Tokenizer::from_serialized("\x01\x02garbage"), Error);
  try {
    Tokenizer::load(dir.file("spiece.model"));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spiece.model"), std::string::npos) << e.what();
  }
}

TEST(EncodePrompts, ZeroesRowsPastEachPromptExactly) {
  TinyTextEncoder enc(3);
  auto& [tok, c, m] = enc;
  const std::vector<std::string> prompts = {"A fox explores a frozen lake.", "&amp;amp; a   cat", ""};
  const int64_t L = 20;
  const auto t = tokenize_prompts(tok, prompts, L);
  const at::Tensor e = encode_prompts(m, tok, prompts, L, at::kFloat);
  ASSERT_EQ(e.sizes(), (at::IntArrayRef{3, L, c.d_model}));
  at::Tensor raw;
  {
    at::InferenceMode g;
    raw = m->forward(t.input_ids, t.attention_mask);
  }
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t n = t.lengths[b];
    ASSERT_LT(n, L);
    EXPECT_TRUE(e[b].slice(0, n).eq(0).all().item<bool>()) << b;
    for (int64_t i = 0; i < n; ++i) EXPECT_GT(e[b][i].abs().sum().item<double>(), 0.0) << b << "," << i;
    EXPECT_TRUE(at::equal(e[b].slice(0, 0, n), raw[b].slice(0, 0, n))) << b;
    EXPECT_GT(raw[b].slice(0, n).abs().sum().item<double>(), 0.0);  // the encoder's pad rows were not zero
  }
  const at::Tensor e16 = encode_prompts(m, tok, prompts, L, at::kBFloat16);
  EXPECT_EQ(e16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(e16[1].slice(0, t.lengths[1]).eq(0).all().item<bool>());
}

// text_trim: the encoder runs over the longest prompt's tokens only; the embedding keeps its shape, the
// same exact zeros past each prompt, and its real rows agree with the full-length encoding up to the order
// of floating-point sums (the padding is masked with -inf, so it adds nothing).
TEST(EncodePrompts, TrimmedEncodingMatchesTheFullLength) {
  TinyTextEncoder enc(5);
  auto& [tok, c, m] = enc;
  const std::vector<std::string> prompts = {"A fox explores a frozen lake at dawn.", "a cat", ""};
  const int64_t L = 40;
  const auto t = tokenize_prompts(tok, prompts, L);
  const int64_t longest = *std::max_element(t.lengths.begin(), t.lengths.end());
  ASSERT_LT(longest, L);
  const at::Tensor full = encode_prompts(m, tok, prompts, L, at::kFloat);
  int64_t saved = -1;
  const at::Tensor trimmed = encode_prompts(m, tok, prompts, L, at::kFloat, true, &saved);
  ASSERT_EQ(trimmed.sizes(), full.sizes());
  EXPECT_EQ(saved, 3 * (L - longest));
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t n = t.lengths[b];
    EXPECT_TRUE(trimmed[b].slice(0, n).eq(0).all().item<bool>()) << b;
    EXPECT_LT((trimmed[b].slice(0, 0, n) - full[b].slice(0, 0, n)).abs().max().item<double>(), 1e-5) << b;
  }
  EXPECT_GT(full.abs().max().item<double>(), 0.1);  // not a comparison of zeros
  // Each prompt alone (as the pipeline encodes them): trimmed to its own length.
  saved = -1;
  const at::Tensor one = encode_prompts(m, tok, {prompts[1]}, L, at::kFloat, true, &saved);
  EXPECT_EQ(saved, L - t.lengths[1]);
  EXPECT_LT((one[0] - full[1]).abs().max().item<double>(), 1e-5);
  // Off: nothing saved, the full-length encoding itself.
  saved = -1;
  EXPECT_TRUE(at::equal(encode_prompts(m, tok, prompts, L, at::kFloat, false, &saved), full));
  EXPECT_EQ(saved, 0);
}
