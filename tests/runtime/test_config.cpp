// The component configs as read from a checkpoint or a golden folder: strict types (2.5 and true are
// not integers, null is not a value), required widths, sane ranges, and errors that name the file as
// well as the key. And `verify`, which must fail a golden pair that compares nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "runtime/checkpoint.h"
#include "base/json_read.h"
#include "base/error.h"
#include "runtime/models.h"
#include "runtime/safetensors.h"
#include "runtime/umt5.h"
#include "runtime/unipc_scheduler.h"
#include "runtime/verify.h"
#include "runtime/wan_transformer.h"
#include "runtime/wan_vae.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace autooptim;
using namespace autooptim::runtime;
using nlohmann::json;

namespace {

using autooptim::test::error_of;

json golden_config(const std::string& pair) {
  return read_json_file(test::golden_dir() + "/" + pair + "_weights.json")["config"];
}

}  // namespace

TEST(Config, IntegersMustBeIntegers) {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"num_attention_heads", 2.5, "'num_attention_heads' must be an integer, got 2.5"},
      {"num_attention_heads", true, "'num_attention_heads' must be an integer, got true"},
      {"num_layers", "2", "'num_layers' must be an integer"},
      {"in_channels", nullptr, "'in_channels' must not be null"},
      {"patch_size", json::array({1, 2.0, 2}), "'patch_size' must be an integer, got 2.0"},
      {"cross_attn_norm", 1, "'cross_attn_norm' must be true or false, got 1"},
      {"eps", "1e-6", "'eps' must be a number"},
      {"eps", -1e-6, "'eps' must be a positive finite number"},
      {"eps", 0, "'eps' must be a positive finite number"},
      // 2^40 heads: the width heads x head_dim would overflow into a negative dimension.
      {"num_attention_heads", int64_t{1} << 40, "'num_attention_heads' 1099511627776 is implausibly large"},
      {"num_attention_heads", int64_t{1} << 22, "x attention_head_dim = 201326592 is implausibly large"},
      {"num_attention_heads", uint64_t{18446744073709551615ull}, "out of the integer range"},
      {"num_layers", -3, "'num_layers' must be positive, got -3"},
  };
  for (const auto& c : cases) {
    json j = golden_config("transformer_tiny");
    j[c.key] = c.value;
    const std::string msg = error_of([&] { WanTransformerConfig::from_json(j); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.key << " = " << c.value.dump() << ": " << msg;
    EXPECT_NE(msg.find("transformer config"), std::string::npos) << msg;
  }
  for (const char* required : {"num_attention_heads", "attention_head_dim", "in_channels", "num_layers", "ffn_dim"}) {
    json j = golden_config("transformer_tiny");
    j.erase(required);
    EXPECT_NE(error_of([&] {
                WanTransformerConfig::from_json(j);
              }).find(std::string("'") + required + "' is required but missing"),
              std::string::npos)
        << required;
  }
  EXPECT_EQ(WanTransformerConfig::from_json(golden_config("transformer_tiny")).num_attention_heads, 2);
}

TEST(Config, EveryComponentIsStrict) {
  json u = golden_config("umt5_tiny");
  u["d_model"] = true;
  EXPECT_NE(error_of([&] { UMT5Config::from_json(u); }).find("umt5 config: 'd_model' must be an integer, got true"),
            std::string::npos);
  u = golden_config("umt5_tiny");
  u["layer_norm_epsilon"] = -1e-6;
  EXPECT_NE(error_of([&] { UMT5Config::from_json(u); }).find("'layer_norm_epsilon' must be a positive finite number"),
            std::string::npos);
  u = golden_config("umt5_tiny");
  u.erase("vocab_size");
  EXPECT_NE(error_of([&] { UMT5Config::from_json(u); }).find("'vocab_size' is required"), std::string::npos);

  json v = golden_config("vae_tiny");
  v["z_dim"] = 8.5;
  EXPECT_NE(error_of([&] { WanVAEConfig::from_json(v); }).find("vae config: 'z_dim' must be an integer, got 8.5"),
            std::string::npos);
  v = golden_config("vae_tiny");
  v["in_channels"] = nullptr;
  EXPECT_NE(error_of([&] { WanVAEConfig::from_json(v); }).find("'in_channels' must not be null"), std::string::npos);
  v = golden_config("vae_tiny");
  v["is_residual"] = 1;
  EXPECT_NE(error_of([&] { WanVAEConfig::from_json(v); }).find("'is_residual' must be true or false"),
            std::string::npos);
  v = golden_config("vae_tiny");
  v["latents_std"][3] = nullptr;
  EXPECT_NE(error_of([&] { WanVAEConfig::from_json(v); }).find("'latents_std' must not hold null"), std::string::npos);
  v = golden_config("vae_tiny");
  v["dropout"] = "none";
  EXPECT_NE(error_of([&] { WanVAEConfig::from_json(v); }).find("'dropout' must be a number"), std::string::npos);
  // diffusers' nulls that mean "the default" stay accepted.
  v = golden_config("vae_tiny");
  v["decoder_base_dim"] = nullptr;
  EXPECT_EQ(WanVAEConfig::from_json(v).decoder_base_dim, 8);

  json s = read_json_file(test::golden_dir() + "/unipc_io.json")["config"];
  s["solver_order"] = 2.5;
  EXPECT_NE(
      error_of([&] { UniPCConfig::from_json(s); }).find("scheduler config: 'solver_order' must be an integer, got 2.5"),
      std::string::npos);
  s["solver_order"] = true;
  EXPECT_NE(error_of([&] { UniPCConfig::from_json(s); }).find("'solver_order' must be an integer, got true"),
            std::string::npos);
  s["solver_order"] = 2;
  s["lower_order_final"] = 1;
  EXPECT_NE(error_of([&] { UniPCConfig::from_json(s); }).find("'lower_order_final' must be true or false"),
            std::string::npos);
  s["lower_order_final"] = true;
  s["flow_shift"] = -5;
  EXPECT_NE(error_of([&] { UniPCConfig::from_json(s); }).find("'flow_shift' must be a positive finite number"),
            std::string::npos);
}

TEST(Config, CheckpointConfigErrorsNameTheFileAndTheKey) {
  test::TempDir tmp;
  const fs::path d = tmp.path();
  for (const char* sub : {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"})
    fs::create_directories(d / sub);
  const auto c = ti2v_5b_configs();
  test::write_bytes((d / "model_index.json").string(), R"({"_class_name": "WanPipeline"})");
  json t = c.transformer.to_json();
  t["num_attention_heads"] = 2.5;
  test::write_bytes((d / "transformer/config.json").string(), t.dump());
  test::write_bytes((d / "vae/config.json").string(), c.vae.to_json().dump());
  test::write_bytes((d / "text_encoder/config.json").string(), c.text_encoder.to_json().dump());
  test::write_bytes((d / "tokenizer/spiece.model").string(), "x");
  test::write_bytes((d / "scheduler/scheduler_config.json").string(), UniPCConfig{}.to_json().dump());
  std::string msg = error_of([&] { read_checkpoint_configs(d.string()); });
  EXPECT_NE(msg.find((d / "transformer/config.json").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'num_attention_heads' must be an integer, got 2.5"), std::string::npos) << msg;

  // A config nested 100,000 levels deep: an error naming file and key, not a stack overflow.
  test::write_bytes((d / "transformer/config.json").string(), c.transformer.to_json().dump());
  test::write_bytes((d / "scheduler/scheduler_config.json").string(),
                    R"({"prediction_type": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
  msg = error_of([&] { read_checkpoint_configs(d.string()); });
  EXPECT_NE(msg.find("scheduler_config.json: nesting deeper than 64 levels at 'prediction_type'"), std::string::npos)
      << msg.substr(0, 300);
}

namespace {

// A golden folder holding the shipped unipc pair and one transformer pair with the given io tensors.
void golden_with_transformer_io(const fs::path& dir, const std::vector<std::pair<std::string, at::Tensor>>& io,
                                const json& config) {
  for (const char* f : {"unipc_io.json", "unipc_io.safetensors", "transformer_tiny_weights.safetensors"})
    fs::copy_file(fs::path(test::golden_dir()) / f, dir / f);
  test::write_bytes((dir / "transformer_tiny_weights.json").string(), json{{"config", config}}.dump());
  write_safetensors((dir / "transformer_tiny_io.safetensors").string(), io);
}

}  // namespace

TEST(Verify, AGoldenPairWithNoExpectedOutputsFails) {
  // The io file holds the inputs but none of the outputs the transformer verifier compares: the pair
  // checked nothing, which must not pass because the scheduler pair next to it does.
  test::TempDir tmp;
  golden_with_transformer_io(
      tmp.path(), {{"hidden_states", at::zeros({1, 48, 1, 2, 2})}, {"encoder_hidden_states", at::zeros({1, 4, 40})}},
      golden_config("transformer_tiny"));
  VerifyOptions o;
  const auto rep = verify_golden_dir(tmp.path().string(), o);
  size_t unipc_pass = 0;
  bool empty_row = false;
  for (const auto& r : rep.rows) {
    if (r.component == "unipc") unipc_pass += r.pass;
    if (r.component == "transformer_tiny") {
      empty_row = true;
      EXPECT_FALSE(r.pass);
      EXPECT_NE(r.tensor.find("no expected outputs"), std::string::npos) << r.tensor;
    }
  }
  EXPECT_GT(unipc_pass, 0u);
  EXPECT_TRUE(empty_row);
  EXPECT_FALSE(rep.all_pass());
}

TEST(Verify, AGoldenConfigErrorNamesTheFile) {
  test::TempDir tmp;
  json cfg = golden_config("transformer_tiny");
  cfg["num_layers"] = true;
  golden_with_transformer_io(tmp.path(), {{"hidden_states", at::zeros({1})}}, cfg);
  const std::string msg = error_of([&] { verify_golden_dir(tmp.path().string(), VerifyOptions{}); });
  EXPECT_NE(msg.find("transformer_tiny_weights.json: transformer config: 'num_layers' must be an integer, got true"),
            std::string::npos)
      << msg;
}

// JSON from files we did not write is read in time linear in its size: a safetensors header of 100,000
// empty tensors (85 s when nlohmann's callback parse walked each object's members at every member's end)
// and a config of 40,000 members parse in well under the bound, and the checks still hold at that size.
TEST(JsonRead, ManyMembersParseInLinearTime) {
  std::string header = "{";
  for (int i = 0; i < 100000; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  header += "}";
  const auto t0 = std::chrono::steady_clock::now();
  const auto j = autooptim::runtime::parse_json_text(header, "header");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(j.size(), 100000u);
  EXPECT_LT(s, 10.0) << "100,000 members took " << s << " s";
  std::string flat = "{";
  for (int i = 0; i < 40000; ++i) flat += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  // The duplicate check still sees the last key against the first.
  EXPECT_THROW(autooptim::runtime::parse_json_text(flat + ",\"k0\":1}", "config"), autooptim::Error);
  EXPECT_EQ(autooptim::runtime::parse_json_text(flat + "}", "config").size(), 40000u);
}
