#pragma once
// Files of a run folder that must never be seen half-written (proposals, done markers, reports, tier
// manifests): written to a temporary name in the same folder, fsynced, checked, then renamed over the
// target, so the target holds its old content or all of the new one. A full disk is an Error naming
// the file and the system's reason, never an empty file. And the lock that keeps two runs out of one
// folder.
#include <string>
#include <string_view>

namespace autooptim::gates {

// Throws Error("<path>: cannot write: <reason>") and leaves no temporary behind when any step fails.
void write_file_atomic(const std::string& path, std::string_view content);

// Appends `line` and a newline with one write() and fsyncs; throws Error naming the file on failure.
void append_line_durable(const std::string& path, std::string_view line);

// An exclusive flock on `path` (created if needed), held for the object's lifetime and released by the
// kernel when the process ends, however it ends. The descriptor is close-on-exec, so spawned processes
// never inherit it.
class FolderLock {
 public:
  // Throws Error when another process holds the lock, naming `what` ("--out folder X") and that
  // process's pid when it wrote one.
  FolderLock(const std::string& path, const std::string& what);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace autooptim::gates
