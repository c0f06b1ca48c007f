#include "executors/agent_decoys.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace fs = std::filesystem;

namespace autooptim::executors {

Decoys::Decoys(const std::vector<std::string>& paths, const std::string& dir) {
  if (paths.empty()) return;
  fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) throw Error("agent decoys: inotify is unavailable");
  fs::create_directories(dir);
  for (size_t k = 0; k < paths.size(); ++k) {
    bool seen = false;
    for (const auto& b : binds_) seen = seen || b.second == paths[k];
    if (seen) continue;
    const fs::path decoy = fs::path(dir) / ("decoy-" + std::to_string(k));
    {
      std::ofstream out(decoy);
      out << "autooptim: this is a decoy. What was here does not enter an agent's sandbox; opening this file was "
             "recorded in the run's report.\n";
    }
    fs::permissions(decoy, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
    const int w = inotify_add_watch(fd_, decoy.c_str(), IN_OPEN | IN_ACCESS);
    if (w < 0) throw Error("agent decoys: cannot watch " + decoy.string());
    binds_.push_back({decoy.string(), paths[k]});
    watches_.push_back(w);
    reported_.push_back(false);
  }
}

Decoys::~Decoys() {
  if (fd_ >= 0) close(fd_);
}

std::vector<std::string> Decoys::opened() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (fd_ < 0) return out;
  alignas(inotify_event) char buf[4096];
  for (ssize_t n; (n = read(fd_, buf, sizeof buf)) > 0;) {
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
      for (size_t k = 0; k < watches_.size(); ++k)
        if (watches_[k] == e->wd && !reported_[k]) {
          reported_[k] = true;
          out.push_back(binds_[k].second);
        }
      off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
  return out;
}

}  // namespace autooptim::executors
