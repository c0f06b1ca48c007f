#pragma once
// Decoys at the places an agent would look for what it must not have (docs/agents.md): the held-out prompt
// files and the run's ledger do not exist inside the sandbox, so an attempt to read them fails there and the
// host never learns of it. A decoy, a small read-only file bound at the real path, makes a read attempt
// visible: its opening is seen through inotify and recorded as blocked. The decoy holds no secret.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace autooptim::executors {

class Decoys {
 public:
  // One decoy per path, written in `dir` and watched from now on.
  Decoys(const std::vector<std::string>& paths, const std::string& dir);
  ~Decoys();
  Decoys(const Decoys&) = delete;
  Decoys& operator=(const Decoys&) = delete;

  // {decoy file, the path it stands in for}: bind each read-only at that path inside the sandbox.
  const std::vector<std::pair<std::string, std::string>>& binds() const { return binds_; }
  // Reads the watch: the real paths whose decoy was opened since the last call, each once in a run.
  std::vector<std::string> opened();

 private:
  int fd_ = -1;
  std::vector<std::pair<std::string, std::string>> binds_;
  std::vector<int> watches_;
  std::vector<bool> reported_;
  std::mutex mu_;
};

}  // namespace autooptim::executors
