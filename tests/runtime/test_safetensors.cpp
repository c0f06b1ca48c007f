// The safetensors reader, sharded checkpoints and strict loading: good files load bit-exactly, every
// kind of damage gives a CheckpointError naming the file and the problem.
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "error_of.h"
#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/nn.h"
#include "runtime/safetensors.h"
#include "test_util.h"

using namespace autooptim;
using namespace autooptim::runtime;
using autooptim::test::raw_safetensors;
using autooptim::test::TempDir;
using autooptim::test::write_bytes;

namespace {

std::string error_of(const std::function<void()>& f) { return autooptim::test::error_of<CheckpointError>(f); }

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir tmp;
  const auto path = tmp.file("a.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> ts = {
      {"f32", at::randn({3, 4})},
      {"f16", at::randn({5}).to(at::kHalf)},
      {"bf16", at::randn({2, 3, 2}).to(at::kBFloat16)},
      {"i64", at::arange(7, at::kLong)},
      {"i32", at::arange(6, at::kInt).view({2, 3})},
      {"f64", at::randn({2}, at::kDouble)},
      {"scalar", at::tensor(3.5f).view({})},
      {"empty", at::empty({0, 4})},
  };
  write_safetensors(path, ts, {{"format", "pt"}});
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->names().size(), ts.size());
  for (const auto& [name, t] : ts) {
    const at::Tensor back = f->tensor(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(back.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(back, t)) << name;
  }
  EXPECT_EQ(to_string(f->info("bf16").dtype), std::string("BF16"));
}

TEST(Safetensors, TensorsAreCopyOnWriteViews) {
  TempDir tmp;
  const auto path = tmp.file("a.safetensors");
  write_safetensors(path, {{"x", at::ones({4})}});
  {
    auto f = SafetensorsFile::open(path);
    at::Tensor t = f->tensor("x");
    t.fill_(7);  // must not crash and must not reach the file
  }
  EXPECT_TRUE(at::equal(SafetensorsFile::open(path)->tensor("x"), at::ones({4})));
}

TEST(Safetensors, TensorKeepsMappingAlive) {
  TempDir tmp;
  const auto path = tmp.file("a.safetensors");
  write_safetensors(path, {{"x", at::arange(10, at::kFloat)}});
  at::Tensor t = SafetensorsFile::open(path)->tensor("x");
  EXPECT_FLOAT_EQ(t[9].item<float>(), 9.0f);
}

TEST(Safetensors, Float8IsRecognisedAndDecoded) {
  TempDir tmp;
  const auto path = tmp.file("f8.safetensors");
  // e4m3fn: 0x38 = 1.0, 0xC0 = -2.0, 0x01 = 2^-9 (subnormal), 0x7f = NaN; e5m2: 0x3c = 1.0, 0x7c = inf.
  const std::string header = R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[4,6]}})";
  write_bytes(path, raw_safetensors(header, std::string("\x38\xC0\x01\x7f\x3c\x7c", 6)));
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->info("a").dtype, StDType::F8_E4M3);
  const at::Tensor a = f->tensor("a");
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_FLOAT_EQ(a[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(a[1].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(a[2].item<float>(), 1.0f / 512.0f);
  EXPECT_TRUE(std::isnan(a[3].item<float>()));
  const at::Tensor b = f->tensor("b");
  EXPECT_FLOAT_EQ(b[0].item<float>(), 1.0f);
  EXPECT_TRUE(std::isinf(b[1].item<float>()));
}

TEST(Safetensors, UnalignedDataIsCopied) {
  TempDir tmp;
  const auto path = tmp.file("u.safetensors");
  // Header of odd length so the data block starts unaligned.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  if ((8 + header.size()) % 4 == 0) header += " ";
  float v[2] = {1.5f, -2.5f};
  write_bytes(path, raw_safetensors(header, std::string(reinterpret_cast<char*>(v), 8)));
  const at::Tensor x = SafetensorsFile::open(path)->tensor("x");
  EXPECT_FLOAT_EQ(x[0].item<float>(), 1.5f);
  EXPECT_FLOAT_EQ(x[1].item<float>(), -2.5f);
}

struct BadFile {
  const char* label;
  std::string bytes;
  const char* expect;  // substring of the message
};

TEST(Safetensors, DamagedFilesGiveClearErrors) {
  const std::string ok_header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  const std::vector<BadFile> cases = {
      {"empty", "", "shorter than the 8-byte header length"},
      {"short", "abc", "shorter than the 8-byte header length"},
      {"header past end", raw_safetensors(ok_header, data, ok_header.size() + 100), "runs past the end of the file"},
      {"huge header", raw_safetensors(ok_header, data, 1ull << 40), "implausibly large"},
      {"bad json", raw_safetensors("{\"x\": [", data), "not valid JSON"},
      {"not object", raw_safetensors("[1,2]", data), "not a JSON object"},
      {"unknown dtype", raw_safetensors(R"({"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", data),
       "unknown dtype 'Q4'"},
      {"offsets past end", raw_safetensors(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data),
       "run past the end of the data"},
      {"truncated data", raw_safetensors(ok_header, std::string(5, '\0')), "run past the end of the data"},
      {"size mismatch", raw_safetensors(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
       "shape needs 12"},
      {"reversed offsets", raw_safetensors(R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data),
       "begin after they end"},
      {"overlap",
       raw_safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       data),
       "overlap"},
      {"negative dim", raw_safetensors(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data), "negative"},
      {"missing field", raw_safetensors(R"({"x":{"dtype":"F32","shape":[2]}})", data),
       "needs dtype, shape and data_offsets"},
      {"bad metadata", raw_safetensors(R"({"__metadata__":{"a":1}})", ""), "__metadata__.a is not a string"},
  };
  TempDir tmp;
  for (const auto& c : cases) {
    const auto path = tmp.file("bad.safetensors");
    write_bytes(path, c.bytes);
    const std::string msg = error_of([&] { SafetensorsFile::open(path); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.label << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << c.label << ": message must name the file: " << msg;
  }
  EXPECT_NE(error_of([&] { SafetensorsFile::open(tmp.file("nope.safetensors")); }).find("cannot open"),
            std::string::npos);
}

TEST(Checkpoint, ShardedIndexLoadsEveryTensor) {
  TempDir tmp;
  const at::Tensor a = at::randn({3}), b = at::randn({2, 2}), c = at::randn({4});
  write_safetensors(tmp.file("model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}});
  write_safetensors(tmp.file("model-00002-of-00002.safetensors"), {{"c", c}});
  nlohmann::json idx = {{"metadata", {{"total_size", 36}}},
                        {"weight_map",
                         {{"a", "model-00001-of-00002.safetensors"},
                          {"b", "model-00001-of-00002.safetensors"},
                          {"c", "model-00002-of-00002.safetensors"}}}};
  write_bytes(tmp.file("model.safetensors.index.json"), idx.dump());
  const auto src = TensorSource::open(tmp.path().string());  // the folder finds the index
  EXPECT_EQ(src.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(at::equal(src.tensor("c"), c));
  EXPECT_EQ(src.shape("b"), (std::vector<int64_t>{2, 2}));
}

TEST(Checkpoint, ShardedIndexErrors) {
  TempDir tmp;
  write_safetensors(tmp.file("s1.safetensors"), {{"a", at::zeros({1})}});
  write_bytes(tmp.file("m.safetensors.index.json"), R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  EXPECT_NE(error_of([&] {
              TensorSource::open(tmp.file("m.safetensors.index.json"));
            }).find("shard 's2.safetensors' is missing"),
            std::string::npos);
  write_bytes(tmp.file("m.safetensors.index.json"), R"({"weight_map":{"a":"s1.safetensors","z":"s1.safetensors"}})");
  EXPECT_NE(
      error_of([&] { TensorSource::open(tmp.file("m.safetensors.index.json")); }).find("holds 'z' but it does not"),
      std::string::npos);
  write_bytes(tmp.file("m.safetensors.index.json"), R"({"weight_map":{"a":"../s1.safetensors"}})");
  EXPECT_NE(error_of([&] { TensorSource::open(tmp.file("m.safetensors.index.json")); }).find("plain file name"),
            std::string::npos);
  write_bytes(tmp.file("m.safetensors.index.json"), R"({"weight_map": 3})");
  EXPECT_NE(error_of([&] { TensorSource::open(tmp.file("m.safetensors.index.json")); }).find("no weight_map"),
            std::string::npos);
  write_bytes(tmp.file("m.safetensors.index.json"), R"({"weight_map": )");
  EXPECT_NE(error_of([&] { TensorSource::open(tmp.file("m.safetensors.index.json")); }).find("not valid JSON"),
            std::string::npos);
  TempDir empty;
  EXPECT_NE(error_of([&] { TensorSource::open(empty.path().string()); }).find("no *.safetensors"), std::string::npos);
}

namespace {
struct Toy : torch::nn::Module {
  Toy() {
    lin = register_module("lin", Linear(3, 2, true, at::kFloat));
    table = add_param(*this, "table", {1, 4}, at::kFloat);
  }
  Linear lin{nullptr};
  at::Tensor table;
};
}  // namespace

TEST(Checkpoint, StrictLoadCopiesAndNamesEveryProblemAtOnce) {
  Toy toy;
  EXPECT_EQ(parameter_shapes(toy), (std::map<std::string, std::vector<int64_t>>{
                                       {"lin.weight", {2, 3}}, {"lin.bias", {2}}, {"table", {1, 4}}}));
  const at::Tensor w = at::randn({2, 3}), b = at::randn({2}), t = at::randn({1, 4});
  load_strict(toy, TensorSource::from_tensors({{"lin.weight", w}, {"lin.bias", b}, {"table", t}}, "mem"));
  EXPECT_TRUE(at::equal(toy.lin->weight, w));
  EXPECT_TRUE(at::equal(toy.table, t));

  // bf16 checkpoint into fp32 parameters converts.
  load_strict(toy,
              TensorSource::from_tensors({{"lin.weight", w.to(at::kBFloat16)}, {"lin.bias", b}, {"table", t}}, "mem"));
  EXPECT_TRUE(at::equal(toy.lin->weight, w.to(at::kBFloat16).to(at::kFloat)));

  const std::string msg = error_of([&] {
    load_strict(toy,
                TensorSource::from_tensors({{"lin.weight", at::zeros({3, 3})}, {"extra", b}, {"other.x", b}}, "ckpt"));
  });
  EXPECT_NE(msg.find("2 missing, 2 unexpected, 1 mis-shaped"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: lin.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: table"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected: extra"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mis-shaped: lin.weight (checkpoint [3,3], model expects [2,3])"), std::string::npos) << msg;
  // Nothing was copied on failure.
  EXPECT_TRUE(at::equal(toy.table, t));

  // A prefix selects one component of a combined file; allowed extras are ignored.
  LoadOptions o;
  o.prefix = "m.";
  o.ignore_unexpected = {"m.tied"};
  load_strict(toy,
              TensorSource::from_tensors(
                  {{"m.lin.weight", w}, {"m.lin.bias", b}, {"m.table", t}, {"m.tied", t}, {"n.x", t}}, "mem"),
              o);
}

TEST(Checkpoint, ReadJsonFileErrorsNameTheFile) {
  TempDir tmp;
  write_bytes(tmp.file("c.json"), "{ nope");
  const std::string msg = error_of([&] { read_json_file(tmp.file("c.json")); });
  EXPECT_NE(msg.find("c.json: not valid JSON"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------------
// Issue 17: inputs that used to be accepted silently.

TEST(Safetensors, HeaderLengthOneByteShortIsRefused) {
  // A header padded with a space parses at one byte less too; every tensor would then be read one
  // byte early, and the data block would have one byte after the last tensor.
  TempDir tmp;
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  const std::string data("\x00\x00\xc0\x3f\x00\x00\x20\xc0", 8);  // 1.5, -2.5
  write_bytes(tmp.file("ok.safetensors"), raw_safetensors(header, data));
  EXPECT_FLOAT_EQ(SafetensorsFile::open(tmp.file("ok.safetensors"))->tensor("x")[0].item<float>(), 1.5f);
  write_bytes(tmp.file("short.safetensors"), raw_safetensors(header, data, header.size() - 1));
  const std::string msg = error_of([&] { SafetensorsFile::open(tmp.file("short.safetensors")); });
  EXPECT_NE(msg.find("1 bytes after the last tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("short.safetensors"), std::string::npos) << msg;
}

TEST(Safetensors, DataOffsetsMustCoverTheDataBlockExactly) {
  const std::string data(16, '\0');
  struct Case {
    const char* label;
    std::string header;
    std::string data;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"gap at the start", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data,
       "bytes [0, 8) of the data block belong to no tensor"},
      {"gap between",
       R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("y":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       data, "bytes [4, 8) of the data block belong to no tensor"},
      {"bytes after the last", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data,
       "8 bytes after the last tensor"},
      {"no tensor but data", R"({"__metadata__":{"a":"b"}})", data, "16 bytes after the last tensor"},
      // The old check compared neighbours only: a zero-size tensor between two overlapping ones hid the overlap.
      {"zero-size tensor hides an overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
       R"("c":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       std::string(8, '\0'), "overlap"},
      {"duplicate name",
       R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       data, "'x' is given twice"},
      {"NUL ends the JSON", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + std::string(1, '\0') + "junk",
       std::string(8, '\0'), "NUL byte"},
      {"trailing junk", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}junk)", std::string(8, '\0'),
       "not valid JSON"},
  };
  TempDir tmp;
  for (const auto& c : cases) {
    const auto path = tmp.file("bad.safetensors");
    write_bytes(path, raw_safetensors(c.header, c.data));
    const std::string msg = error_of([&] { SafetensorsFile::open(path); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.label << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << c.label << ": " << msg;
  }
  // Zero-size tensors at the edges of their neighbours are fine, in any order of the header.
  const auto ok = tmp.file("ok.safetensors");
  write_bytes(ok, raw_safetensors(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                                  R"("e":{"dtype":"F32","shape":[0],"data_offsets":[16,16]},)"
                                  R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("z":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]}})",
                                  data));
  EXPECT_EQ(SafetensorsFile::open(ok)->names().size(), 4u);
}

TEST(Safetensors, DeeplyNestedHeaderIsRefusedNotACrash) {
  TempDir tmp;
  const size_t depth = 200000;
  const std::string header = R"({"x":{"dtype":"F32","shape":)" + std::string(depth, '[') + std::string(depth, ']') +
                             R"(,"data_offsets":[0,0]}})";
  write_bytes(tmp.file("deep.safetensors"), raw_safetensors(header, ""));
  const std::string msg = error_of([&] { SafetensorsFile::open(tmp.file("deep.safetensors")); });
  EXPECT_NE(msg.find("nesting deeper than"), std::string::npos) << msg.substr(0, 300);
  EXPECT_NE(msg.find("'x.shape'"), std::string::npos) << msg.substr(0, 300);
}

TEST(Safetensors, GarbageAfterAPlausibleHeaderIsRefusedAtOnce) {
  // 90 MiB after a header that declares 8 bytes: refused from the sizes alone, without reading them.
  TempDir tmp;
  const auto path = tmp.file("big.safetensors");
  write_bytes(path, raw_safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  std::filesystem::resize_file(path, 90ull << 20);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { TensorSource::open(path); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(msg.find("bytes after the last tensor"), std::string::npos) << msg;
  EXPECT_LT(s, 2.0);
}

TEST(Checkpoint, IntegerTensorsDoNotLoadIntoFloatParameters) {
  Toy toy;
  const at::Tensor w = at::randn({2, 3}), b = at::randn({2}), t = at::randn({1, 4});
  const at::Tensor before = toy.lin->weight.clone();
  std::string msg = error_of([&] {
    load_strict(toy, TensorSource::from_tensors(
                         {{"lin.weight", at::ones({2, 3}, at::kInt)}, {"lin.bias", b}, {"table", t}}, "mem"));
  });
  EXPECT_NE(msg.find("1 of the wrong dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("wrong dtype: lin.weight (checkpoint Int, model expects Float)"), std::string::npos) << msg;
  EXPECT_TRUE(at::equal(toy.lin->weight, before));  // nothing copied

  // From a file: the file's dtype name; bool and u8 are refused too; every float kind converts.
  TempDir tmp;
  write_safetensors(tmp.file("i.safetensors"),
                    {{"lin.weight", at::ones({2, 3}, at::kLong)}, {"lin.bias", b.to(at::kBool)}, {"table", t}});
  msg = error_of([&] { load_strict(toy, TensorSource::open(tmp.file("i.safetensors"))); });
  EXPECT_NE(msg.find("2 of the wrong dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lin.weight (checkpoint I64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lin.bias (checkpoint BOOL"), std::string::npos) << msg;
  write_safetensors(tmp.file("f.safetensors"),
                    {{"lin.weight", w.to(at::kHalf)}, {"lin.bias", b.to(at::kDouble)}, {"table", t.to(at::kBFloat16)}});
  load_strict(toy, TensorSource::open(tmp.file("f.safetensors")));
  EXPECT_TRUE(at::equal(toy.lin->weight, w.to(at::kHalf).to(at::kFloat)));
  EXPECT_TRUE(dtype_loads_into(at::kBFloat16, at::kFloat));
  EXPECT_FALSE(dtype_loads_into(at::kByte, at::kFloat));
  EXPECT_FALSE(dtype_loads_into(at::kFloat, at::kLong));
  EXPECT_TRUE(dtype_loads_into(at::kLong, at::kLong));
}

TEST(Checkpoint, ReadJsonFileRefusesNulDuplicatesAndDeepNesting) {
  TempDir tmp;
  write_bytes(tmp.file("nul.json"), std::string("{\"a\": 1}\0{\"junk", 15));
  EXPECT_NE(error_of([&] { read_json_file(tmp.file("nul.json")); }).find("nul.json: not valid JSON: NUL byte"),
            std::string::npos);
  write_bytes(tmp.file("dup.json"), R"({"a": {"b": 1, "b": 2}})");
  EXPECT_NE(error_of([&] { read_json_file(tmp.file("dup.json")); }).find("key 'a.b' is given twice"),
            std::string::npos);
  for (const size_t depth : {100000, 1000000}) {
    write_bytes(tmp.file("deep.json"), R"({"num_layers": )" + std::string(depth, '[') + std::string(depth, ']') + "}");
    const std::string msg = error_of([&] { read_json_file(tmp.file("deep.json")); });
    EXPECT_NE(msg.find("deep.json: nesting deeper than 64 levels at 'num_layers'"), std::string::npos)
        << msg.substr(0, 300);
  }
  write_bytes(tmp.file("ok.json"), R"({"a": [[1, 2], {"b": null}], "c": "x"})");
  EXPECT_EQ(read_json_file(tmp.file("ok.json"))["a"][0][1], 2);
}
