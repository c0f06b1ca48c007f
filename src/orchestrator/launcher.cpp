#include "orchestrator/launcher.h"
#include "base/utc_time.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "base/atomic_file.h"
#include "gates/ledger.h"
#include "base/error.h"
#include "base/log.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string first_line(const std::string& s) {
  const auto p = s.find('\n');
  return trim(p == std::string::npos ? s : s.substr(0, p));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

// Slurm's states in which a job will not run again (the task is gone; its worker with it).
bool terminal_state(const std::string& s) {
  static const std::set<std::string> t = {"COMPLETED",     "CANCELLED", "FAILED",      "TIMEOUT",
                                          "PREEMPTED",     "NODE_FAIL", "BOOT_FAIL",   "DEADLINE",
                                          "OUT_OF_MEMORY", "REVOKED",   "SPECIAL_EXIT"};
  return t.count(s) > 0;
}

std::string self_exe() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("autooptim") : p.string();
}

std::string cmd_text(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s) {
  CommandResult r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return r;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return r;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return r;
  }
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvp(args[0], args.data());
    const std::string msg = std::string(argv[0]) + ": " + std::strerror(errno) + "\n";
    (void)!write(2, msg.data(), msg.size());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  const double deadline = now_s() + timeout_s;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  bool timed_out = false;
  char buf[4096];
  while (open_fds > 0) {
    const double left = deadline - now_s();
    if (left <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min(left, 1.0) * 1000) + 1) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = !timed_out && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (timed_out)
    r.err += argv[0] + std::string(": timed out after ") + std::to_string(static_cast<int>(timeout_s)) + " s";
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Local

LocalWorkers::LocalWorkers(std::string run_dir, std::vector<std::string> model_cli,
                           std::vector<workers::WorkerSlot> slots, int max_restarts)
    : l_(std::move(run_dir), std::move(model_cli), std::move(slots), max_restarts) {}

std::vector<std::string> LocalWorkers::worker_ids() const {
  std::vector<std::string> ids;
  for (const auto& s : l_.slots()) ids.push_back(s.id);
  return ids;
}

json LocalWorkers::describe() const {
  json slots = json::array();
  for (const auto& s : l_.slots())
    slots.push_back({{"worker", s.id}, {"cuda_visible_devices", s.cuda_visible}, {"threads", s.threads}});
  return {{"kind", "local"}, {"workers", slots}};
}

// ---------------------------------------------------------------------------------------------------
// Slurm

SlurmLauncher::SlurmLauncher(SlurmOptions o) : o_(std::move(o)) {
  o_.run_dir = fs::absolute(o_.run_dir).lexically_normal().string();
  if (!o_.run_dir.empty() && o_.run_dir.back() == '/') o_.run_dir.pop_back();
  if (o_.binary.empty()) o_.binary = self_exe();
  if (o_.workers < 1) throw Error("--workers " + std::to_string(o_.workers) + ": at least 1 Slurm worker");
  if (o_.gpus_per_worker < 0) throw Error("--gpus-per-worker must not be negative");
  if (o_.cpus_per_worker < 1) throw Error("--cpus-per-worker must be at least 1");
  if (o_.max_resubmits < 0) o_.max_resubmits = static_cast<int>(2 * o_.workers);
  if (o_.run_dir.find_first_of(" \t\n") != std::string::npos)
    throw Error("--launcher slurm: the run folder '" + o_.run_dir +
                "' has white space in its path, which #SBATCH lines cannot carry");
}

SlurmLauncher::~SlurmLauncher() {
  try {
    if (!jobs_.empty() && !stopped_) stop(5);
  } catch (...) {
  }
}

std::string SlurmLauncher::worker_id(const std::string& job, int64_t task) {
  return "slurm-" + job + "-" + std::to_string(task);
}

std::string SlurmLauncher::script_path() const { return o_.run_dir + "/slurm/workers.sbatch"; }

std::vector<std::string> SlurmLauncher::job_ids() const { return jobs_; }

std::vector<std::string> SlurmLauncher::worker_ids() const {
  std::vector<std::string> ids;
  for (const auto& k : tasks_) ids.push_back(k.worker);
  return ids;
}

void SlurmLauncher::add_event(const std::string& worker, const std::string& what) {
  events_.push_back({{"time", base::utc_timestamp()}, {"worker", worker}, {"event", what}});
  log::info("slurm: " + worker + ": " + what);
}

std::string SlurmLauncher::submit(const std::string& array_spec) {
  const std::vector<std::string> argv = {"sbatch", "--parsable", "--array=" + array_spec, script_path()};
  const auto r = run_command(argv, 120);
  const std::string job = split(first_line(r.out), ';').empty() ? "" : split(first_line(r.out), ';')[0];
  if (r.status != 0 || job.empty() || job.find_first_not_of("0123456789") != std::string::npos) {
    // sbatch's last line says why (the lines before it are how it got there).
    std::string why;
    for (const auto& line : split(r.err.empty() ? r.out : r.err, '\n'))
      if (!trim(line).empty()) why = trim(line);
    if (why.find("configuration source") != std::string::npos ||
        why.find("Unable to contact slurm controller") != std::string::npos)
      why += " (is this a Slurm submit host? SLURM_CONF or /etc/slurm/slurm.conf must name the cluster)";
    if (r.status == 127) why += " (is Slurm's sbatch installed and on PATH?)";
    throw Error("--launcher slurm: `" + cmd_text(argv) + "` failed (exit " + std::to_string(r.status) + "): " + why);
  }
  jobs_.push_back(job);
  // The tasks of the spec: "a-b" or "k".
  int64_t lo = 0, hi = 0;
  const auto dash = array_spec.find('-');
  lo = std::stoll(array_spec.substr(0, dash));
  hi = dash == std::string::npos ? lo : std::stoll(array_spec.substr(dash + 1));
  for (int64_t i = lo; i <= hi; ++i) {
    Task t;
    t.job = job;
    t.index = i;
    t.worker = worker_id(job, i);
    tasks_.push_back(t);
  }
  return job;
}

void SlurmLauncher::start() {
  fs::create_directories(o_.run_dir + "/slurm");
  fs::create_directories(o_.run_dir + "/workers");
  std::error_code ec;
  fs::remove(o_.run_dir + "/stop", ec);  // a stop left by an earlier (resumed) run would send them home at once
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Written by autooptim run --launcher slurm: each task of this array runs one autooptim worker that\n"
    << "# loads the model once and serves the run in " << o_.run_dir << " (docs/workers.md).\n"
    << "# Submitted as: sbatch --array=0-" << o_.workers - 1 << " " << script_path() << "\n"
    << "#SBATCH --job-name=autooptim-workers\n"
    << "#SBATCH --output=" << o_.run_dir << "/slurm/worker-%A_%a.log\n"
    << "#SBATCH --ntasks=1\n"
    << "#SBATCH --cpus-per-task=" << o_.cpus_per_worker << "\n";
  if (o_.gpus_per_worker > 0) s << "#SBATCH --gres=gpu:" << o_.gpus_per_worker << "\n";
  if (!o_.partition.empty()) s << "#SBATCH --partition=" << o_.partition << "\n";
  if (!o_.time_limit.empty()) s << "#SBATCH --time=" << o_.time_limit << "\n";
  for (const auto& a : o_.sbatch_args) s << "#SBATCH " << a << "\n";
  s << "echo \"autooptim worker slurm-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID} on $(hostname), job "
       "${SLURM_JOB_ID}\"\n";
  // exec: the worker is the batch step's process, so scancel's and pre-emption's SIGTERM reach it
  // directly and it puts its request in progress back before it leaves.
  s << "exec " << shell_quote(o_.binary) << " worker --serve " << shell_quote(o_.run_dir)
    << " --worker-id \"slurm-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}\"";
  for (const auto& a : o_.model_cli) s << " " << shell_quote(a);
  if (o_.gpus_per_worker == 0) s << " --threads " << o_.cpus_per_worker;
  s << "\n";
  gates::write_file_atomic(script_path(), s.str());
  fs::permissions(script_path(), fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add, ec);
  const std::string job = submit("0-" + std::to_string(o_.workers - 1));
  add_event("job " + job, "submitted " + std::to_string(o_.workers) + " worker task(s) (" + script_path() + ")");
}

void SlurmLauncher::refresh(bool force) {
  const double t = now_s();
  if (!force && t - last_poll_ < o_.poll_s) return;
  last_poll_ = t;
  std::set<std::string> live_jobs;
  for (const auto& k : tasks_)
    if (!k.ended) live_jobs.insert(k.job);
  for (const auto& job : live_jobs) {
    // -r: one line per array task, pending ones included; -t all: finished ones while Slurm keeps them.
    const auto r = run_command({"squeue", "-h", "-r", "-t", "all", "-j", job, "-o", "%i|%T|%N|%r"}, 60);
    std::map<int64_t, std::vector<std::string>> seen;
    if (r.status == 0) {
      for (const auto& line : split(r.out, '\n')) {
        const auto f = split(trim(line), '|');
        if (f.size() < 2) continue;
        const auto us = f[0].find('_');
        if (us == std::string::npos || f[0].substr(0, us) != job) continue;
        const std::string idx = f[0].substr(us + 1);
        if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos)
          continue;  // "123_[0-3]": not split yet
        seen[std::stoll(idx)] = f;
      }
    } else if (r.err.find("Invalid job id") == std::string::npos) {
      log::warn("slurm: squeue failed (exit " + std::to_string(r.status) + "): " + first_line(r.err) +
                "; will ask again");
      continue;  // Slurm busy or unreachable: no conclusion from silence
    }
    // Tasks Slurm no longer lists (aged out of the controller's memory): the accounting has their end.
    std::map<int64_t, std::string> acct;
    bool need_acct = false;
    for (const auto& k : tasks_)
      if (k.job == job && !k.ended && !seen.count(k.index)) need_acct = true;
    if (need_acct) {
      const auto a = run_command({"sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State"}, 60);
      if (a.status == 0)
        for (const auto& line : split(a.out, '\n')) {
          const auto f = split(trim(line), '|');
          const auto us = f.empty() ? std::string::npos : f[0].find('_');
          if (f.size() < 2 || us == std::string::npos) continue;
          const std::string idx = f[0].substr(us + 1);
          if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) continue;
          acct[std::stoll(idx)] = split(f[1], ' ')[0];  // "CANCELLED by 0" -> CANCELLED
        }
    }
    for (auto& k : tasks_) {
      if (k.job != job || k.ended) continue;
      if (seen.count(k.index)) {
        const auto& f = seen[k.index];
        k.state = f[1];
        if (f.size() > 2 && !f[2].empty() && f[2] != "(null)") k.node = f[2];
        k.reason = f.size() > 3 && f[3] != "None" ? f[3] : "";
      } else if (acct.count(k.index)) {
        k.state = acct[k.index];
      } else if (k.state != "SUBMITTED") {
        // Known to Slurm before, now in neither squeue nor the accounting: gone.
        k.state = "GONE";
        k.reason = "no longer known to squeue or sacct";
      }
      if (terminal_state(k.state) || k.state == "GONE") k.ended = true;
    }
  }
}

std::vector<std::string> SlurmLauncher::check() {
  std::vector<std::string> died;
  if (stopped_) return died;
  refresh(false);
  std::vector<Task> ended;
  for (auto& k : tasks_)
    if (k.ended && !k.reported) {
      k.reported = true;
      ended.push_back(k);
    }
  for (const auto& k : ended) {
    if (stopping_) continue;
    died.push_back(k.worker);
    std::string what = "task " + k.job + "_" + std::to_string(k.index) + " ended " + k.state +
                       (k.node.empty() ? "" : " on " + k.node) + (k.reason.empty() ? "" : " (" + k.reason + ")") +
                       " while the run needed it";
    if (resubmits_ < o_.max_resubmits) {
      try {
        const std::string job = submit(std::to_string(k.index));
        ++resubmits_;
        what += "; replaced by " + worker_id(job, k.index);
      } catch (const Error& e) {
        what += std::string("; could not be replaced: ") + e.what();
      }
    } else {
      what += "; not replaced (" + std::to_string(o_.max_resubmits) + " replacements used)";
    }
    add_event(k.worker, what);
  }
  return died;
}

bool SlurmLauncher::all_gone() const {
  return std::all_of(tasks_.begin(), tasks_.end(), [](const Task& k) { return k.ended; });
}

std::string SlurmLauncher::last_log_line(const std::string& id) const {
  for (const auto& k : tasks_) {
    if (k.worker != id) continue;
    std::ifstream in(o_.run_dir + "/slurm/worker-" + k.job + "_" + std::to_string(k.index) + ".log");
    std::string line, last;
    while (std::getline(in, line))
      if (!trim(line).empty()) last = trim(line);
    return last;
  }
  return "";
}

void SlurmLauncher::stop(double grace_s) {
  if (stopped_ || jobs_.empty()) {
    stopped_ = true;
    return;
  }
  stopping_ = true;
  // Every worker of the folder leaves after its request in progress (protocol: RUN/stop).
  try {
    gates::write_file_atomic(o_.run_dir + "/stop", "the run is over\n");
  } catch (const Error& e) {
    log::warn(std::string("slurm: ") + e.what());
  }
  const double until = now_s() + grace_s;
  refresh(true);
  while (!all_gone() && now_s() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    refresh(true);
  }
  if (!all_gone()) {
    // Still pending (never started) or still busy: cancelled, pending ones included.
    std::vector<std::string> argv = {"scancel"};
    for (const auto& j : jobs_) argv.push_back(j);
    const auto r = run_command(argv, 60);
    add_event("jobs", "scancel " + cmd_text(std::vector<std::string>(argv.begin() + 1, argv.end())) +
                          (r.status == 0 ? "" : " failed: " + first_line(r.err)));
    const double kill_until = now_s() + 60;
    while (!all_gone() && now_s() < kill_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      refresh(true);
    }
  }
  stopped_ = true;
}

json SlurmLauncher::describe() const {
  json tasks = json::array();
  for (const auto& k : tasks_)
    tasks.push_back({{"worker", k.worker},
                     {"job", k.job},
                     {"task", k.index},
                     {"state", k.state},
                     {"node", k.node},
                     {"reason", k.reason},
                     {"log", "slurm/worker-" + k.job + "_" + std::to_string(k.index) + ".log"}});
  return {{"kind", "slurm"},
          {"script", "slurm/workers.sbatch"},
          {"jobs", jobs_},
          {"workers", o_.workers},
          {"partition", o_.partition},
          {"gpus_per_worker", o_.gpus_per_worker},
          {"cpus_per_worker", o_.cpus_per_worker},
          {"replacements", resubmits_},
          {"tasks", tasks},
          {"events", events_}};
}

}  // namespace autooptim::orchestrator
