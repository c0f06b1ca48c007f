#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace fs = std::filesystem;

namespace autooptim::gates {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Writes everything or returns the errno of the failure (0 on success).
int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

void fsync_folder(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some file systems refuse fsync on a folder
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path_in, std::string_view content) {
  static std::atomic<unsigned> counter{0};
  const fs::path path(path_in);
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()) +
                                             "." + std::to_string(counter++));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path_in + ": cannot write: " + errno_text(errno));
  int err = write_all(fd, content);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw Error(path_in + ": cannot write: " + errno_text(err));
  }
  fsync_folder(path.parent_path());
}

void append_line_durable(const std::string& path, std::string_view line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(path + ": cannot append: " + errno_text(errno));
  std::string row(line);
  row.push_back('\n');
  int err = write_all(fd, row);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (err) throw Error(path + ": cannot append: " + errno_text(err));
}

FolderLock::FolderLock(const std::string& path, const std::string& what) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot create the lock file: " + errno_text(errno));
  int rc;
  while ((rc = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc != 0) {
    const int e = errno;
    char buf[32] = {0};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (e == EWOULDBLOCK)
      throw Error(what + " is in use by another autooptim run" + (holder.empty() ? "" : " (pid " + holder + ")") +
                  "; wait for it to finish or choose another folder");
    throw Error(path + ": cannot lock: " + errno_text(e));
  }
  // The holder's pid, for the message a second run prints; best effort (a full disk must not stop the lock).
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the flock
}

}  // namespace autooptim::gates
