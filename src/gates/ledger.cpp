#include "gates/ledger.h"

#include "base/utc_time.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace autooptim::gates {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Holds an exclusive flock for the duration of one append, so concurrent writers number their
// rows consistently and a torn tail is repaired by one of them only.
class FileLock {
 public:
  FileLock(int fd, const std::string& path) : fd_(fd) {
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) throw Error(path + ": cannot lock ledger: " + errno_text());
    }
  }
  ~FileLock() { flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": ledger write failed: " + errno_text());
    }
    data += n;
    size -= size_t(n);
  }
}

}  // namespace

Ledger::Ledger(const std::string& path) : path_(path) {
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  fd_ = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot open ledger: " + errno_text());
  if (!existed) {
    // Make the new file's directory entry durable too, not only its rows.
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      ::fsync(dir_fd);
      ::close(dir_fd);
    }
  }
}

Ledger::~Ledger() {
  if (fd_ >= 0) ::close(fd_);
}

void Ledger::append(const nlohmann::json& row) {
  if (!row.is_object()) throw Error(path_ + ": a ledger row must be a JSON object, got " + row.type_name());
  FileLock lock(fd_, path_);

  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw Error(path_ + ": cannot stat ledger: " + errno_text());
  uint64_t size = uint64_t(st.st_size);
  if (size < known_size_) known_size_ = 0, known_lines_ = 0;  // replaced underneath us: recount

  // Count the complete lines written since we last looked, remembering where the last one ends.
  uint64_t last_line_end = known_size_;
  std::vector<char> chunk(1 << 16);
  for (uint64_t offset = known_size_; offset < size;) {
    ssize_t n = ::pread(fd_, chunk.data(), std::min<uint64_t>(chunk.size(), size - offset), off_t(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(path_ + ": cannot read ledger: " + errno_text());
    }
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (chunk[size_t(i)] == '\n') ++known_lines_, last_line_end = offset + uint64_t(i) + 1;
    }
    offset += uint64_t(n);
  }
  if (last_line_end < size) {
    // A writer was killed mid-row: those bytes are no finished row, and appending after them would
    // glue our row onto theirs.
    if (::ftruncate(fd_, off_t(last_line_end)) != 0) throw Error(path_ + ": cannot repair torn row: " + errno_text());
    repaired_bytes_ += size - last_line_end;
  }

  nlohmann::json full = row;
  if (!full.contains("seq")) full["seq"] = known_lines_;
  if (!full.contains("ts")) full["ts"] = base::utc_timestamp();
  std::string line = full.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  write_all(fd_, line.data(), line.size(), path_);
  if (::fsync(fd_) != 0) throw Error(path_ + ": fsync failed: " + errno_text());
  known_size_ = last_line_end + line.size();
  known_lines_ += 1;
}

std::vector<nlohmann::json> Ledger::read_all() const { return read_all(nullptr); }

std::vector<nlohmann::json> Ledger::read_all(size_t* dropped_partial_lines) const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw Error(path_ + ": cannot open ledger");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  std::vector<nlohmann::json> rows;
  size_t dropped = 0;
  size_t start = 0;
  for (size_t line_no = 1; start < text.size(); ++line_no) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      // No newline: the row's single write() never finished, so it is not a finished row.
      ++dropped;
      break;
    }
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const std::string where = path_ + ":" + std::to_string(line_no);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range
      throw Error(where + ": invalid ledger row: " + e.what());
    }
    if (!row.is_object()) throw Error(where + ": a ledger row must be a JSON object");
    rows.push_back(std::move(row));
  }
  dropped_partial_lines_ = dropped;
  if (dropped_partial_lines) *dropped_partial_lines = dropped;
  return rows;
}

}  // namespace autooptim::gates
