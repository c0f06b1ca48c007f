// Run-folder files are all-or-nothing: a full disk (a real one: a small tmpfs, or a file-size limit)
// leaves the old content and no temporary, and says why; and one run at a time holds a folder.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "error_of.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using autooptim::Error;
using autooptim::gates::append_line_durable;
using autooptim::gates::FolderLock;
using autooptim::gates::write_file_atomic;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

using autooptim::test::error_of;

// A 64 KiB tmpfs at a fresh folder, unmounted at scope exit; mounted() is false where we may not mount.
class SmallTmpfs {
 public:
  SmallTmpfs() {
    path_ = dir_.path() / "fs";
    fs::create_directories(path_);
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, "size=64k") == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const fs::path& path() const { return path_; }

 private:
  autooptim::test::TempDir dir_;
  fs::path path_;
  bool mounted_ = false;
};

}  // namespace

TEST(AtomicFile, WritesReplacesAndLeavesNoTemporary) {
  autooptim::test::TempDir tmp;
  const auto p = tmp.file("report.json");
  write_file_atomic(p, "first\n");
  EXPECT_EQ(slurp(p), "first\n");
  write_file_atomic(p, std::string(100000, 'x'));
  EXPECT_EQ(slurp(p), std::string(100000, 'x'));
  write_file_atomic(tmp.file("empty"), "");
  EXPECT_EQ(fs::file_size(tmp.file("empty")), 0u);
  EXPECT_EQ(entries(tmp.path()), 2u);
  EXPECT_NE(
      error_of([&] { write_file_atomic(tmp.file("no/such/folder/x"), "x"); }).find("no/such/folder/x: cannot write"),
      std::string::npos);
  append_line_durable(tmp.file("rows.jsonl"), "{\"a\":1}");
  append_line_durable(tmp.file("rows.jsonl"), "{\"a\":2}");
  EXPECT_EQ(slurp(tmp.file("rows.jsonl")), "{\"a\":1}\n{\"a\":2}\n");
}

TEST(AtomicFile, AFullDiskKeepsTheOldContentAndSaysWhy) {
  SmallTmpfs disk;
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)";
  const auto p = (disk.path() / "report.json").string();
  write_file_atomic(p, "old report\n");
  const std::string msg = error_of([&] { write_file_atomic(p, std::string(200 << 10, 'x')); });
  EXPECT_NE(msg.find(p + ": cannot write: No space left on device"), std::string::npos) << msg;
  EXPECT_EQ(slurp(p), "old report\n");
  EXPECT_EQ(entries(disk.path()), 1u);  // no temporary left behind
  // A new file on a full disk is absent afterwards, not empty.
  {
    std::ofstream fill(disk.path() / "filler", std::ios::binary);
    fill << std::string(128 << 10, 'f');
  }
  EXPECT_NE(
      error_of([&] { write_file_atomic((disk.path() / "done").string(), "3\n"); }).find("No space left on device"),
      std::string::npos);
  EXPECT_FALSE(fs::exists(disk.path() / "done"));
  EXPECT_NE(error_of([&] {
              append_line_durable((disk.path() / "trials.jsonl").string(), std::string(8192, 'r'));
            }).find("No space left on device"),
            std::string::npos);
}

TEST(AtomicFile, AFileSizeLimitIsAnErrorNotATruncatedFile) {
  // Works without root: RLIMIT_FSIZE in a child process makes write() fail with EFBIG.
  autooptim::test::TempDir tmp;
  const auto p = tmp.file("big.json");
  write_file_atomic(p, "old\n");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &lim);
    try {
      write_file_atomic(p, std::string(1 << 20, 'x'));
    } catch (const Error& e) {
      _exit(std::string(e.what()).find("File too large") != std::string::npos ? 0 : 3);
    }
    _exit(4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(slurp(p), "old\n");
  EXPECT_EQ(entries(tmp.path()), 1u);
}

TEST(FolderLock, OneHolderAtATime) {
  autooptim::test::TempDir tmp;
  const auto lock_path = tmp.file("run.lock");
  {
    FolderLock first(lock_path, "--out folder X");
    const std::string msg = error_of([&] { FolderLock second(lock_path, "--out folder X"); });
    EXPECT_NE(msg.find("--out folder X is in use by another autooptim run (pid " + std::to_string(getpid()) + ")"),
              std::string::npos)
        << msg;
  }
  FolderLock again(lock_path, "--out folder X");  // released with its holder
}

// remove_tree (base/remove_tree.h) removes what std::filesystem::remove_all would, without it (the GPU
// machine's libtorch exports a broken copy that our binaries bind to): nested folders, files, a link to
// a folder outside (removed, its target kept); a missing path is 0 entries and no error.
TEST(RemoveTree, RemovesAFolderWithEverythingUnderItAndFollowsNoLink) {
  autooptim::test::TempDir tmp;
  const auto root = tmp.path() / "tree";
  std::filesystem::create_directories(root / "a" / "b");
  std::filesystem::create_directories(tmp.path() / "outside");
  autooptim::test::write_bytes((root / "a" / "b" / "f").string(), "x");
  autooptim::test::write_bytes((root / "g").string(), "y");
  autooptim::test::write_bytes((tmp.path() / "outside" / "keep").string(), "z");
  std::filesystem::create_directory_symlink(tmp.path() / "outside", root / "link");
  std::error_code ec;
  EXPECT_EQ(autooptim::runtime::remove_tree(root, ec), 6u);  // tree, a, b, f, g, link
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_FALSE(std::filesystem::exists(root));
  EXPECT_TRUE(std::filesystem::exists(tmp.path() / "outside" / "keep"));
  EXPECT_EQ(autooptim::runtime::remove_tree(root, ec), 0u);
  EXPECT_FALSE(ec);
  // A single file.
  autooptim::test::write_bytes((tmp.path() / "one").string(), "1");
  EXPECT_EQ(autooptim::runtime::remove_tree(tmp.path() / "one"), 1u);
}
