// The JSON-lines reader of files another process appends to: complete rows in order, a torn last line,
// blank and malformed lines skipped, at most `max` rows, nothing from a missing file.
#include <gtest/gtest.h>

#include <string>

#include "base/json_lines.h"
#include "test_util.h"

using autooptim::base::read_json_lines;
using autooptim::test::TempDir;
using autooptim::test::write_bytes;
using nlohmann::json;

TEST(JsonLines, ReadsEveryCompleteRowInOrder) {
  TempDir d;
  write_bytes(d.file("t.jsonl"), "{\"label\":\"a\",\"speedup\":1.5}\n{\"label\":\"b\"}\n[1,2]\n");
  const auto rows = read_json_lines(d.file("t.jsonl"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], json({{"label", "a"}, {"speedup", 1.5}}));
  EXPECT_EQ(rows[1], json({{"label", "b"}}));
  EXPECT_EQ(rows[2], json({1, 2}));
}

TEST(JsonLines, SkipsATornLastLine) {
  TempDir d;
  write_bytes(d.file("t.jsonl"), "{\"label\":\"a\"}\n{\"label\":\"b\"}\n{\"label\":\"c\",\"spe");
  const auto rows = read_json_lines(d.file("t.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].at("label"), "b");
}

TEST(JsonLines, KeepsALastRowThatLacksOnlyItsNewline) {
  TempDir d;
  write_bytes(d.file("t.jsonl"), "{\"n\":1}\n{\"n\":2}");
  const auto rows = read_json_lines(d.file("t.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].at("n"), 2);
}

TEST(JsonLines, SkipsBlankAndMalformedLinesAnywhere) {
  TempDir d;
  write_bytes(d.file("t.jsonl"), "\n{\"n\":1}\n   \n{not json}\n{\"n\":2}\n\n");
  const auto rows = read_json_lines(d.file("t.jsonl"));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("n"), 1);
  EXPECT_EQ(rows[1].at("n"), 2);
}

TEST(JsonLines, ReadsAtMostMaxRows) {
  TempDir d;
  write_bytes(d.file("t.jsonl"), "{\"n\":1}\nbad\n{\"n\":2}\n{\"n\":3}\n{\"n\":4}\n");
  const auto rows = read_json_lines(d.file("t.jsonl"), 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("n"), 1);
  EXPECT_EQ(rows[1].at("n"), 2);
  EXPECT_TRUE(read_json_lines(d.file("t.jsonl"), 0).empty());
  EXPECT_EQ(read_json_lines(d.file("t.jsonl")).size(), 4u);
}

TEST(JsonLines, AMissingFileHasNoRows) {
  TempDir d;
  EXPECT_TRUE(read_json_lines(d.file("absent.jsonl")).empty());
  EXPECT_TRUE(read_json_lines(d.path()).empty());  // a folder reads as nothing too
}
