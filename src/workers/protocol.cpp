#include "workers/protocol.h"
#include "base/utc_time.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "base/atomic_file.h"
#include "gates/ledger.h"
#include "base/error.h"
#include "base/process_identity.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::workers {

using base::host_name;

namespace {
double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ns_stamp() {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  char b[32];
  std::snprintf(b, sizeof b, "%020lld", static_cast<long long>(ns));
  return b;
}

// The request id inside a queue name "<stamp>-<id>.json".
std::string id_of_name(const std::string& name) {
  const auto dash = name.find('-');
  std::string s = dash == std::string::npos ? name : name.substr(dash + 1);
  if (s.size() > 5 && s.substr(s.size() - 5) == ".json") s.resize(s.size() - 5);
  return s;
}
}  // namespace

std::string Layout::workers() const { return (fs::path(run) / "workers").string(); }
std::string Layout::worker(const std::string& id) const { return (fs::path(run) / "workers" / id).string(); }
std::string Layout::queue() const { return (fs::path(run) / "queue").string(); }
std::string Layout::responses() const { return (fs::path(run) / "responses").string(); }
std::string Layout::cancel() const { return (fs::path(run) / "cancel").string(); }
std::string Layout::stop_all() const { return (fs::path(run) / "stop").string(); }

std::optional<json> read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return json::parse(in);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void stop_all(const std::string& run_dir) {
  Layout l{run_dir};
  fs::create_directories(run_dir);
  gates::write_file_atomic(l.stop_all(), base::utc_timestamp() + "\n");
}

Client::Client(std::string run_dir, std::string client_name, ClientOptions options)
    : layout_{std::move(run_dir)}, name_(std::move(client_name)), opt_(options) {
  for (const auto& d : {layout_.queue(), layout_.responses(), layout_.cancel(), layout_.workers()})
    fs::create_directories(d);
}

std::string Client::submit(json request) {
  if (!request.contains("kind")) throw Error("worker request without a kind");
  std::random_device rd;
  char tail[16];
  std::snprintf(tail, sizeof tail, "%06x", rd() & 0xffffff);
  const std::string id = name_ + "-" + std::to_string(getpid()) + "-" + std::to_string(++seq_) + "-" + tail;
  request["id"] = id;
  request["client"] = name_;
  request["protocol"] = kProtocolVersion;
  if (!request.contains("attempt")) request["attempt"] = 0;
  request["submitted"] = base::utc_timestamp();
  gates::write_file_atomic((fs::path(layout_.queue()) / (ns_stamp() + "-" + id + ".json")).string(),
                           request.dump() + "\n");
  return id;
}

std::optional<json> Client::poll(const std::string& id) const {
  return read_json_file((fs::path(layout_.responses()) / (id + ".json")).string());
}

std::vector<WorkerInfo> Client::workers() const {
  std::vector<WorkerInfo> out;
  std::error_code ec;
  if (!fs::is_directory(layout_.workers(), ec)) return out;
  for (const auto& e : fs::directory_iterator(layout_.workers(), ec)) {
    if (!e.is_directory()) continue;
    const auto reg = read_json_file((e.path() / "worker.json").string());
    if (!reg) continue;
    WorkerInfo w;
    w.id = e.path().filename().string();
    w.registration = *reg;
    w.state = reg->value("state", "");
    if (fs::exists(e.path() / "dead")) w.state = "dead";
    w.host = reg->value("host", "");
    w.pid = reg->value("pid", int64_t{0});
    w.device = reg->value("device", "");
    w.device_name = reg->value("device_name", "");
    w.model = reg->value("model", "");
    w.weights = reg->value("weights", "");
    w.weights_id = reg->value("weights_id", "");
    w.build = reg->value("build", "");
    const auto hb = read_json_file((e.path() / "heartbeat.json").string());
    w.heartbeat = hb ? *hb : json();
    out.push_back(w);
  }
  std::sort(out.begin(), out.end(), [](const WorkerInfo& a, const WorkerInfo& b) { return a.id < b.id; });
  return out;
}

int Client::requeue_dead() {
  const double now = steady_now();
  const std::string here = host_name();
  int requeued = 0;
  for (const auto& w : workers()) {
    if (w.state == "stopped" || w.state == "failed") {
      // A worker that left cleanly put its request back itself; one that failed may hold a claim.
    }
    bool dead = w.state == "dead" || w.state == "failed" || w.state == "stopped";
    if (!dead) {
      const int64_t seq = w.heartbeat.is_object() ? w.heartbeat.value("seq", int64_t{-1}) : -1;
      auto& s = seen_[w.id];
      if (s.since == 0 || seq != s.seq) s = {seq, now};
      if (now - s.since > opt_.dead_after_s) dead = true;
      if (w.host == here && w.pid > 0 && ::kill(static_cast<pid_t>(w.pid), 0) != 0 && errno == ESRCH) dead = true;
    }
    if (!dead) continue;
    const fs::path wdir = layout_.worker(w.id);
    std::error_code ec;
    if (w.state != "dead" && w.state != "stopped" && w.state != "failed" && !fs::exists(wdir / "dead"))
      gates::write_file_atomic(
          (wdir / "dead").string(),
          "declared dead by " + name_ + " (pid " + std::to_string(getpid()) + ") at " + base::utc_timestamp() + "\n");
    if (!fs::is_directory(wdir / "claimed", ec)) continue;
    for (const auto& e : fs::directory_iterator(wdir / "claimed", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".tmp", 0) == 0) continue;
      const fs::path aside = wdir / ("requeue-" + name + "-" + std::to_string(getpid()));
      if (::rename(e.path().c_str(), aside.c_str()) != 0) continue;  // another janitor took it
      auto req = read_json_file(aside.string());
      const std::string id = id_of_name(name);
      if (!req) {
        fs::remove(aside, ec);
        continue;
      }
      const int attempt = req->value("attempt", 0) + 1;
      if (attempt >= opt_.max_attempts) {
        // Answered for the workers that died: no worker's counters.
        Response resp;
        resp.id = id;
        resp.kind = req->value("kind", "");
        resp.worker = w.id;
        resp.attempt = attempt;
        resp.finished = base::utc_timestamp();
        resp.error = "the request was in progress on " + std::to_string(attempt) + " workers that died (last: " + w.id +
                     "); not queued again";
        gates::write_file_atomic((fs::path(layout_.responses()) / (id + ".json")).string(),
                                 resp.to_json().dump() + "\n");
      } else {
        (*req)["attempt"] = attempt;
        (*req)["requeued_from"] = w.id;
        gates::write_file_atomic((fs::path(layout_.queue()) / name).string(), req->dump() + "\n");
        ++requeued;
      }
      fs::remove(aside, ec);
    }
  }
  return requeued;
}

void cancel_client_requests(const std::string& run_dir, const std::string& client_name) {
  const Layout l{run_dir};
  std::error_code ec;
  auto mine = [&](const fs::path& f) {
    const auto r = read_json_file(f.string());
    return r && r->value("client", "") == client_name ? r->value("id", "") : std::string();
  };
  for (const auto& e : fs::directory_iterator(l.queue(), ec))
    if (!mine(e.path()).empty()) fs::remove(e.path(), ec);
  for (const auto& w : fs::directory_iterator(l.workers(), ec)) {
    if (!w.is_directory()) continue;
    std::error_code ec2;
    for (const auto& e : fs::directory_iterator(w.path() / "claimed", ec2))
      if (const std::string id = mine(e.path()); !id.empty())
        gates::write_file_atomic((fs::path(l.cancel()) / id).string(), client_name + " is gone\n");
  }
}

void Client::cancel(const std::string& id) {
  gates::write_file_atomic((fs::path(layout_.cancel()) / id).string(), name_ + "\n");
  // A request nobody claimed yet is simply withdrawn.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(layout_.queue(), ec))
    if (id_of_name(e.path().filename().string()) == id) fs::remove(e.path(), ec);
}

json Client::wait(const std::string& id, const std::function<void()>& tick) {
  const double start = steady_now();
  double no_worker_since = -1;
  while (true) {
    if (auto r = poll(id)) return *r;
    if (tick) {
      try {
        tick();
      } catch (...) {
        cancel(id);
        throw;
      }
    }
    const double now = steady_now();
    if (now - last_janitor_ >= 1.0) {
      last_janitor_ = now;
      requeue_dead();
      if (auto r = poll(id)) return *r;
      bool any_alive = false;
      for (const auto& w : workers()) any_alive = any_alive || w.state == "loading" || w.state == "ready";
      if (any_alive) {
        no_worker_since = -1;
      } else {
        if (no_worker_since < 0) no_worker_since = now;
        if (now - no_worker_since > opt_.no_worker_s)
          throw Error("no worker serves " + layout_.run + " (none registered, loading or ready for " +
                      std::to_string(static_cast<int>(opt_.no_worker_s)) + " s; request " + id + " waited " +
                      std::to_string(static_cast<int>(now - start)) + " s)");
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(opt_.poll_s));
  }
}

Response Client::call(json request, const std::function<void()>& tick) {
  const std::string kind = request.value("kind", "");
  const std::string id = submit(std::move(request));
  const Response r = Response::from_json(wait(id, tick), "response to " + id);
  if (!r.ok) throw Error("worker " + r.worker + ": " + kind + " request failed: " + r.error);
  return r;
}

}  // namespace autooptim::workers
