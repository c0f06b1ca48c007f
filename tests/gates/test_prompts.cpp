// The evaluation prompts: split sizes and nesting, the visible/held-out wall, the hash pin; and the
// SHA-256 behind the pin, against the FIPS 180-2 test vectors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "error_of.h"
#include "gates/prompts.h"
#include "base/sha256.h"
#include "base/error.h"
#include "test_util.h"

namespace autooptim::gates {
namespace {

std::string prompts_dir() { return std::string(AUTOOPTIM_SOURCE_DIR) + "/prompts"; }

std::set<std::string> ids_of(const std::vector<Prompt>& prompts) {
  std::set<std::string> ids;
  for (const auto& p : prompts) ids.insert(p.id);
  return ids;
}

bool subset(const std::set<std::string>& a, const std::set<std::string>& b) {
  return std::includes(b.begin(), b.end(), a.begin(), a.end());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

using autooptim::test::error_of;

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, IncrementalUpdatesMatchOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(char(i * 37 + 11));
  // Lengths around the 55/56/64-byte padding boundaries, fed in uneven pieces.
  for (size_t len : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u, 1000u}) {
    const std::string msg = data.substr(0, len);
    Sha256 h;
    for (size_t pos = 0, step = 1; pos < len; pos += step, step = step * 3 % 71 + 1) {
      h.update(msg.data() + pos, std::min(step, len - pos));
    }
    EXPECT_EQ(h.hex_digest(), sha256_hex(msg)) << len;
  }
  test::TempDir dir;
  test::write_bytes(dir.file("f"), data);
  EXPECT_EQ(sha256_file_hex(dir.file("f")), sha256_hex(data));
  EXPECT_THROW(sha256_file_hex(dir.file("missing")), Error);
}

TEST(Prompts, SplitSizesAndNesting) {
  const PromptSet set = load_prompts(prompts_dir(), true);
  const auto smoke = ids_of(set.split("smoke"));
  const auto val = ids_of(set.split("val"));
  const auto core = ids_of(set.split("core"));
  const auto h16 = ids_of(set.split("heldout16"));
  const auto h60 = ids_of(set.split("heldout60"));
  EXPECT_EQ(smoke.size(), 3u);
  EXPECT_EQ(val.size(), 8u);
  EXPECT_EQ(core.size(), 20u);
  EXPECT_EQ(h16.size(), 16u);
  EXPECT_EQ(h60.size(), 60u);
  EXPECT_TRUE(subset(smoke, val));
  EXPECT_TRUE(subset(val, core));
  EXPECT_TRUE(subset(h16, h60));
  EXPECT_EQ(set.all().size(), 80u);
}

TEST(Prompts, CategoriesAreCovered) {
  const PromptSet set = load_prompts(prompts_dir(), true);
  std::map<std::string, int> overall, in_val, in_h16;
  for (const auto& p : set.all()) ++overall[p.category];
  for (const auto& p : set.split("val")) ++in_val[p.category];
  for (const auto& p : set.split("heldout16")) ++in_h16[p.category];
  ASSERT_EQ(prompt_categories().size(), 8u);
  for (const auto& c : prompt_categories()) {
    EXPECT_EQ(overall[c], 10) << c;
    EXPECT_EQ(in_val[c], 1) << c;
    EXPECT_EQ(in_h16[c], 2) << c;
  }
  for (const auto& p : set.all()) {
    if (p.category == "ambiguous-short") {
      const auto words = std::count(p.text.begin(), p.text.end(), ' ') + 1;
      EXPECT_LE(words, 4) << p.id;
    }
  }
}

TEST(Prompts, VisibleAndHeldOutNeverOverlap) {
  const auto visible = load_prompt_file(prompts_dir() + "/visible.jsonl");
  const auto heldout = load_prompt_file(prompts_dir() + "/heldout.jsonl");
  EXPECT_EQ(visible.size(), 20u);
  EXPECT_EQ(heldout.size(), 60u);
  std::set<std::string> ids, texts;
  for (const auto& p : visible) ids.insert(p.id), texts.insert(p.text);
  for (const auto& p : heldout) {
    EXPECT_EQ(ids.count(p.id), 0u) << p.id;
    EXPECT_EQ(texts.count(p.text), 0u) << p.id;
    ids.insert(p.id);
    texts.insert(p.text);
  }
  EXPECT_EQ(ids.size(), 80u);
  EXPECT_EQ(texts.size(), 80u);
  for (const auto& p : visible) {
    for (const auto& s : p.splits) EXPECT_TRUE(s == "smoke" || s == "val" || s == "core") << p.id;
    EXPECT_FALSE(p.splits.empty());
  }
  for (const auto& p : heldout) {
    for (const auto& s : p.splits) EXPECT_TRUE(s == "heldout16" || s == "heldout60") << p.id;
    EXPECT_FALSE(p.splits.empty());
  }
  // Every prompt is in some split; the visible core and heldout60 are the whole of each file.
  const PromptSet set = load_prompts(prompts_dir(), true);
  EXPECT_EQ(set.split("core").size() + set.split("heldout60").size(), 80u);
}

TEST(Prompts, ExecutorsCannotReachHeldOut) {
  const PromptSet visible = load_prompts(prompts_dir(), false);
  EXPECT_FALSE(visible.includes_heldout());
  EXPECT_EQ(visible.all().size(), 20u);
  EXPECT_EQ(visible.split("core").size(), 20u);
  EXPECT_NE(error_of([&] { visible.split("heldout16"); }).find("held out"), std::string::npos);
  EXPECT_THROW(visible.split("heldout60"), Error);
  const std::string unknown = error_of([&] { visible.split("test"); });
  EXPECT_NE(unknown.find("unknown prompt split 'test'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("smoke, val, core, heldout16, heldout60"), std::string::npos) << unknown;
}

TEST(Prompts, PinMatchesShippedFile) { EXPECT_EQ(sha256_file_hex(prompts_dir() + "/heldout.jsonl"), kHeldoutSha256); }

TEST(Prompts, ModifiedHeldOutIsRefused) {
  test::TempDir dir;
  std::filesystem::copy_file(prompts_dir() + "/visible.jsonl", dir.file("visible.jsonl"));
  std::string heldout = read_text(prompts_dir() + "/heldout.jsonl");
  test::write_bytes(dir.file("heldout.jsonl"), heldout);
  EXPECT_EQ(load_prompts(dir.path().string(), true).all().size(), 80u);

  // One changed character, still well-formed.
  const size_t text_start = heldout.find("\"prompt\": \"");
  ASSERT_NE(text_start, std::string::npos);
  heldout[text_start + 11] ^= 0x20;  // flip the case of the first prompt's first letter
  test::write_bytes(dir.file("heldout.jsonl"), heldout);
  const std::string message = error_of([&] { load_prompts(dir.path().string(), true); });
  EXPECT_NE(message.find("heldout.jsonl has changed (sha256 "), std::string::npos) << message;
  EXPECT_NE(message.find("!= pinned " + std::string(kHeldoutSha256) + "); refusing"), std::string::npos) << message;
  // Without the held-out prompts nothing reads that file.
  EXPECT_EQ(load_prompts(dir.path().string(), false).all().size(), 20u);
}

TEST(Prompts, MalformedLinesNameFileAndLine) {
  test::TempDir dir;
  const std::string path = dir.file("p.jsonl");
  const std::string good = R"({"id":"x-01","category":"low-motion","prompt":"A still pond.","splits":["core"]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", ":2: not valid JSON"},
      {"[1, 2]", ":2: expected a JSON object"},
      {R"({"id":"x-02","category":"low-motion","prompt":"p","splits":["core"],"extra":1})", ":2: unknown key 'extra'"},
      {R"({"id":"x-02","category":"low-motion","splits":["core"]})", ":2: missing key 'prompt'"},
      {R"({"id":"x-02","category":"weather","prompt":"p","splits":["core"]})", ":2: category: 'weather'"},
      {R"({"id":"x-02","category":"low-motion","prompt":"","splits":["core"]})", ":2: prompt: expected a non-empty"},
      {R"({"id":"x-02","category":"low-motion","prompt":"p","splits":[]})", ":2: splits: expected a non-empty array"},
      {R"({"id":"x-02","category":"low-motion","prompt":"p","splits":["train"]})",
       ":2: splits: \"train\" is not one of"},
      {R"({"id":"x-02","category":"low-motion","prompt":"p","splits":["val"]})",
       ":2: splits: 'val' is nested in 'core'"},
      {R"({"id":"x-02","category":"low-motion","prompt":"p","splits":["core","core"]})",
       ":2: splits: 'core' is listed twice"},
      {R"({"id":"x-01","category":"low-motion","prompt":"p","splits":["core"]})", ":2: id 'x-01' appears twice"},
  };
  for (const auto& [line, expected] : cases) {
    test::write_bytes(path, good + "\n" + line + "\n");
    const std::string message = error_of([&] { load_prompt_file(path); });
    EXPECT_EQ(message.rfind(path + expected, 0), 0u)
        << "expected '" << path + expected << "...', got '" << message << "'";
  }
  test::write_bytes(path, good + "\n\n");
  EXPECT_EQ(load_prompt_file(path).size(), 1u);
  EXPECT_THROW(load_prompt_file(dir.file("missing.jsonl")), Error);

  // A held-out split in the visible file is refused.
  test::write_bytes(dir.file("visible.jsonl"),
                    R"({"id":"x-01","category":"low-motion","prompt":"p","splits":["heldout60"]})"
                    "\n");
  EXPECT_NE(error_of([&] { load_prompts(dir.path().string(), false); }).find("does not belong in this file"),
            std::string::npos);
}

TEST(Prompts, IdsAreSafeFileNames) {
  using nlohmann::json;
  // Ids name files of a run (videos/<id>.mp4, the baseline cache): "../../x" would write outside --out.
  test::TempDir dir;
  const std::string path = dir.file("p.jsonl");
  auto line = [](const std::string& id) {
    return json{{"id", id}, {"category", "low-motion"}, {"prompt", "A still pond."}, {"splits", {"core"}}}.dump() +
           "\n";
  };
  for (const std::string& bad : std::vector<std::string>{"../../x", "..", ".", ".hidden", "a/b", "a\\b", "a b", "x\ny",
                                                         "caf\xc3\xa9", std::string(65, 'a'), std::string("a\0b", 3)}) {
    test::write_bytes(path, line(bad));
    const std::string message = error_of([&] { load_prompt_file(path); });
    EXPECT_NE(message.find(path + ":1: id: "), std::string::npos) << "'" << bad << "': " << message;
    EXPECT_NE(message.find("is not a valid prompt id"), std::string::npos) << "'" << bad << "': " << message;
    EXPECT_FALSE(valid_prompt_id(bad)) << bad;
  }
  for (const std::string& good : std::vector<std::string>{"mh-01", "A.b_c-9", "x..y", std::string(64, 'z')}) {
    test::write_bytes(path, line(good));
    EXPECT_EQ(load_prompt_file(path).at(0).id, good);
  }
}

TEST(Prompts, HostileLinesAreRefusedNotCrashes) {
  test::TempDir dir;
  const std::string path = dir.file("p.jsonl");
  const std::string good = R"({"id":"x-01","category":"low-motion","prompt":"A still pond.","splits":["core"]})";
  test::write_bytes(path, R"({"id":"x-01","category":"low-motion","prompt":"p","splits":)" + std::string(100000, '[') +
                              std::string(100000, ']') + "}\n");
  EXPECT_NE(error_of([&] { load_prompt_file(path); }).find(":1: nesting deeper than 64 levels at 'splits'"),
            std::string::npos);
  test::write_bytes(path, good + std::string(1, '\0') + "junk\n");
  EXPECT_NE(error_of([&] { load_prompt_file(path); }).find(":1: not valid JSON: NUL byte"), std::string::npos);
  test::write_bytes(path, R"({"id":"x-01","id":"../x","category":"low-motion","prompt":"p","splits":["core"]})"
                          "\n");
  EXPECT_NE(error_of([&] { load_prompt_file(path); }).find("key 'id' is given twice"), std::string::npos);
}

}  // namespace
}  // namespace autooptim::gates

// A byte-order mark is refused with a message that names it, not read as part of the first prompt's id.
TEST(Prompts, AByteOrderMarkIsRefusedByName) {
  autooptim::test::TempDir tmp;
  const std::string path = tmp.file("p.jsonl");
  std::ofstream(path, std::ios::binary)
      << "\xEF\xBB\xBF"
      << R"({"id":"a-01","category":"low-motion","prompt":"x","splits":["smoke","val","core"]})"
      << "\n";
  try {
    autooptim::gates::load_prompt_file(path);
    FAIL() << "a BOM was accepted";
  } catch (const autooptim::Error& e) {
    EXPECT_NE(std::string(e.what()).find("byte-order mark"), std::string::npos) << e.what();
  }
}
