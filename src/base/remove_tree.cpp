#include "base/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace autooptim::runtime {
namespace {

thread_local std::uintmax_t removed_count = 0;

int remove_entry(const char* p, const struct stat*, int, struct FTW*) {
  if (std::remove(p) != 0) return errno ? errno : EIO;
  ++removed_count;
  return 0;
}

}  // namespace

std::uintmax_t remove_tree(const std::filesystem::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = std::error_code(errno, std::generic_category());
    return 0;
  }
  removed_count = 0;
  const int rc = ::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) ec = std::error_code(rc > 0 ? rc : (errno ? errno : EIO), std::generic_category());
  return removed_count;
}

std::uintmax_t remove_tree(const std::filesystem::path& path) {
  std::error_code ec;
  const auto n = remove_tree(path, ec);
  if (ec) throw std::system_error(ec, "cannot remove " + path.string());
  return n;
}

}  // namespace autooptim::runtime
