#include "workers/launcher.h"
#include "base/utc_time.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "base/atomic_file.h"
#include "gates/ledger.h"
#include "base/error.h"
#include "base/spawn.h"
#include "workers/protocol.h"

namespace fs = std::filesystem;

namespace autooptim::workers {

std::vector<WorkerSlot> plan_slots(const std::string& gpus, int64_t workers, int64_t gpu_count, int64_t cpu_cores) {
  std::vector<WorkerSlot> out;
  if (!gpus.empty()) {
    if (gpu_count <= 0)
      throw Error("--gpus " + gpus + ": no CUDA GPU is visible to this build (run on the CPU with --workers N)");
    std::vector<int64_t> ids;
    if (gpus == "all") {
      for (int64_t i = 0; i < gpu_count; ++i) ids.push_back(i);
    } else {
      std::stringstream s(gpus);
      std::string item;
      while (std::getline(s, item, ',')) {
        if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 4)
          throw Error("--gpus '" + gpus + "': expected all or a list of GPU indices like 0,1");
        const int64_t i = std::stoll(item);
        if (i >= gpu_count)
          throw Error("--gpus " + gpus + ": GPU " + item + " does not exist (" + std::to_string(gpu_count) +
                      " visible)");
        for (int64_t j : ids)
          if (j == i) throw Error("--gpus " + gpus + ": GPU " + item + " is listed twice");
        ids.push_back(i);
      }
      if (ids.empty()) throw Error("--gpus '" + gpus + "': expected all or a list of GPU indices like 0,1");
    }
    // Map through an inherited CUDA_VISIBLE_DEVICES (index i of what this process sees).
    std::vector<std::string> visible;
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
      std::stringstream s(v);
      std::string item;
      while (std::getline(s, item, ',')) visible.push_back(item);
    }
    for (int64_t i : ids)
      out.push_back({"gpu" + std::to_string(i),
                     i < static_cast<int64_t>(visible.size()) ? visible[static_cast<size_t>(i)] : std::to_string(i),
                     0});
    return out;
  }
  if (workers < 1) throw Error("--workers " + std::to_string(workers) + ": at least 1");
  const int64_t threads = std::max<int64_t>(1, cpu_cores / workers);
  for (int64_t i = 0; i < workers; ++i) out.push_back({"cpu" + std::to_string(i), "", workers > 1 ? threads : 0});
  return out;
}

LocalLauncher::LocalLauncher(std::string run_dir, std::vector<std::string> model_cli, std::vector<WorkerSlot> slots,
                             int max_restarts)
    : run_(std::move(run_dir)),
      model_cli_(std::move(model_cli)),
      slots_(std::move(slots)),
      max_restarts_(max_restarts) {}

LocalLauncher::~LocalLauncher() {
  try {
    stop(5);
  } catch (...) {
  }
}

pid_t LocalLauncher::spawn(const WorkerSlot& s) {
  const Layout l{run_};
  fs::create_directories(l.workers());
  std::vector<std::string> args = {"autooptim", "worker", "--serve", run_, "--worker-id", s.id};
  args.insert(args.end(), model_cli_.begin(), model_cli_.end());
  if (s.threads > 0) args.insert(args.end(), {"--threads", std::to_string(s.threads)});
  runtime::SelfSpawn sp;
  sp.args = args;
  sp.env = s.cuda_visible.empty()
               ? runtime::environment_with({}, {})
               : runtime::environment_with({"CUDA_VISIBLE_DEVICES"}, {"CUDA_VISIBLE_DEVICES=" + s.cuda_visible});
  sp.log_file = (fs::path(l.workers()) / (s.id + ".log")).string();
  sp.truncate_log = false;  // a restarted worker appends to its earlier lines
  sp.header = "autooptim worker " + s.id + ": starting (" + base::utc_timestamp() + "):";
  for (const auto& a : args) sp.header += " " + a;
  sp.header += "\n";
  sp.what = "a worker";
  return runtime::spawn_self(sp);
}

void LocalLauncher::start() {
  stopped_ = false;
  std::error_code ec;
  fs::remove(Layout{run_}.stop_all(), ec);
  for (size_t i = 0; i < slots_.size(); ++i) running_[spawn(slots_[i])] = i;
}

std::vector<std::string> LocalLauncher::check() {
  std::vector<std::string> died;
  for (auto it = running_.begin(); it != running_.end();) {
    int status = 0;
    struct rusage ru {};
    const pid_t r = wait4(it->first, &status, WNOHANG, &ru);
    if (r != it->first) {
      ++it;
      continue;
    }
    const size_t slot = it->second;
    it = running_.erase(it);
    exited_rss_[slots_[slot].id] = std::max(exited_rss_[slots_[slot].id], ru.ru_maxrss);
    if (stopped_) continue;
    died.push_back(slots_[slot].id);
    // Its claimed requests go back to the queue before a replacement starts.
    Client janitor(run_, "launcher");
    janitor.requeue_dead();
    if (restarts_[slot] < max_restarts_) {
      ++restarts_[slot];
      running_[spawn(slots_[slot])] = slot;
    }
  }
  return died;
}

bool LocalLauncher::all_gone() const { return running_.empty(); }

std::string LocalLauncher::last_log_line(const std::string& id) const {
  return runtime::last_log_line((fs::path(Layout{run_}.workers()) / (id + ".log")).string());
}

void LocalLauncher::stop(double grace_s) {
  if (running_.empty()) {
    stopped_ = true;
    return;
  }
  stopped_ = true;
  try {
    stop_all(run_);
  } catch (const std::exception&) {
    // a full disk: the signals below still stop them
  }
  auto reap = [&](double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!running_.empty() && std::chrono::steady_clock::now() < until) {
      check();
      if (!running_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  reap(grace_s);
  for (const auto& [pid, slot] : running_) kill(pid, SIGTERM);
  reap(10);
  for (const auto& [pid, slot] : running_) kill(pid, SIGKILL);
  reap(5);
}

}  // namespace autooptim::workers
