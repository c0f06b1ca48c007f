// The ledger: append/read round trip, no finished row lost to a killed writer, and concurrent
// writers from several processes keeping every line intact.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "gates/ledger.h"
#include "base/error.h"
#include "test_util.h"

namespace autooptim::gates {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void append_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << text;
}

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Ledger, AppendReadRoundTrip) {
  test::TempDir dir;
  const std::string path = dir.file("ledger.jsonl");
  {
    Ledger ledger(path);
    EXPECT_TRUE(ledger.read_all().empty());
    ledger.append({{"manifest", "a"}, {"verdict", {{"performance", "pass"}}}, {"time_s", 1.5}});
    ledger.append({{"manifest", "b"}, {"seq", 99}, {"ts", "fixed"}, {"note", "line\nbreak"}});
    ledger.append({{"manifest", "c"}});
    EXPECT_THROW(ledger.append(json::array({1, 2})), Error);
  }
  Ledger reopened(path);  // opening an existing ledger keeps its rows
  const auto rows = reopened.read_all();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["manifest"], "a");
  EXPECT_EQ(rows[0]["verdict"]["performance"], "pass");
  EXPECT_EQ(rows[0]["seq"], 0);
  EXPECT_EQ(rows[1]["seq"], 99);  // given values are kept
  EXPECT_EQ(rows[1]["ts"], "fixed");
  EXPECT_EQ(rows[1]["note"], "line\nbreak");
  EXPECT_EQ(rows[2]["seq"], 2);
  const std::string ts = rows[0]["ts"];
  ASSERT_EQ(ts.size(), 24u) << ts;  // 2025-03-01T12:34:56.789Z
  EXPECT_EQ(ts[4], '-');
  EXPECT_EQ(ts[10], 'T');
  EXPECT_EQ(ts.back(), 'Z');
  EXPECT_EQ(reopened.dropped_partial_lines(), 0u);

  reopened.append({{"manifest", "d"}});
  EXPECT_EQ(reopened.read_all().back()["seq"], 3);
  // One row per line, nothing else.
  const std::string text = read_text(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Ledger, KilledWriterLosesNoFinishedRow) {
  test::TempDir dir;
  const std::string path = dir.file("ledger.jsonl");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    try {
      Ledger ledger(path);
      for (int i = 0; i < 5; ++i) ledger.append({{"row", i}});
      char done = 1;
      (void)!write(ready[1], &done, 1);
      // Until killed (bounded, so a failed parent never leaves it running).
      for (int i = 5; i < 200000; ++i) ledger.append({{"row", i}, {"padding", std::string(512, 'x')}});
    } catch (...) {
    }
    _exit(0);
  }
  close(ready[1]);
  char done = 0;
  ASSERT_EQ(read(ready[0], &done, 1), 1);
  close(ready[0]);
  kill(child, SIGKILL);
  const int status = wait_child(child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before it was killed";

  // Whatever the kill interrupted, the rows are 0..n-1 in order, each complete.
  Ledger ledger(path);
  const auto rows = ledger.read_all();
  ASSERT_GE(rows.size(), 5u);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["row"], i);
    EXPECT_EQ(rows[i]["seq"], i);
  }

  // A torn last row, as a write cut short would leave, is dropped and reported, not an error.
  append_text(path, R"({"row": 1000000, "verdict": {"perf)");
  size_t dropped = 0;
  EXPECT_EQ(ledger.read_all(&dropped).size(), rows.size());
  EXPECT_EQ(dropped, 1u);
  EXPECT_EQ(ledger.dropped_partial_lines(), 1u);

  // The next run (--resume) appends after the last finished row; the torn bytes are cut first.
  Ledger resumed(path);
  resumed.append({{"row", "resumed"}});
  const auto after = resumed.read_all(&dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(after.size(), rows.size() + 1);
  EXPECT_EQ(after.back()["row"], "resumed");
  EXPECT_EQ(after.back()["seq"], rows.size());
  EXPECT_GT(resumed.repaired_bytes(), 0u);
}

TEST(Ledger, InvalidMiddleLineIsAnErrorNamingFileAndLine) {
  test::TempDir dir;
  const std::string path = dir.file("ledger.jsonl");
  {
    Ledger ledger(path);
    ledger.append({{"row", 0}});
  }
  append_text(path, "{broken\n");
  append_text(path, "{\"row\": 2}\n");
  Ledger ledger(path);
  try {
    ledger.read_all();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ":2: invalid ledger row", 0), 0u) << e.what();
  }
  test::write_bytes(path, "{\"row\": 0}\n[1]\n");
  try {
    ledger.read_all();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ":2: a ledger row must be a JSON object");
  }
}

TEST(Ledger, ConcurrentWritersKeepEveryLineIntact) {
  test::TempDir dir;
  const std::string path = dir.file("ledger.jsonl");
  constexpr int kWriters = 3;
  constexpr int kRows = 200;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int code = 0;
      try {
        Ledger ledger(path);
        // Rows of different sizes, some larger than a pipe buffer's atomic limit.
        for (int i = 0; i < kRows; ++i) {
          ledger.append(
              {{"writer", w}, {"i", i}, {"payload", std::string(size_t(1 + (i * 97) % 9000), char('a' + w))}});
        }
      } catch (...) {
        code = 1;
      }
      _exit(code);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    const int status = wait_child(child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  Ledger ledger(path);
  size_t dropped = 0;
  const auto rows = ledger.read_all(&dropped);
  EXPECT_EQ(dropped, 0u);
  ASSERT_EQ(rows.size(), size_t(kWriters * kRows));
  std::set<std::pair<int, int>> seen;
  std::vector<int> next(kWriters, 0);
  for (size_t k = 0; k < rows.size(); ++k) {
    const int w = rows[k]["writer"];
    const int i = rows[k]["i"];
    EXPECT_EQ(rows[k]["payload"].get<std::string>(), std::string(size_t(1 + (i * 97) % 9000), char('a' + w)));
    EXPECT_EQ(i, next[w]++) << "writer " << w << " out of order";
    EXPECT_EQ(rows[k]["seq"], k);  // the lock numbers rows in file order
    seen.insert({w, i});
  }
  EXPECT_EQ(seen.size(), size_t(kWriters * kRows));
}

}  // namespace
}  // namespace autooptim::gates
