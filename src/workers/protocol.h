#pragma once
// The worker protocol: how processes that hold no model (the orchestrator, the executors, any launcher's
// clients) get trials and gate runs done by the processes that do (one worker per device). Everything
// goes through files in the shared run folder, so a worker may run on this host (local launcher: one
// per GPU, or N on the CPU) or on another host that mounts the folder (a Slurm job array): the
// protocol does not care who started the worker. docs/workers.md describes it for launcher authors.
//
// Layout under RUN (the run's --out folder, or any folder both sides can write):
//   workers/<id>/worker.json      registration: written by the worker when it starts (state "loading"),
//                                 rewritten when the model is loaded ("ready") and when it leaves
//                                 ("stopped" / "failed" with the reason)
//   workers/<id>/heartbeat.json   rewritten every heartbeat_s by a thread of the worker: a sequence
//                                 number that must keep moving, what it is doing, its counters
//   workers/<id>/claimed/<name>   the request the worker is running (moved there from queue/)
//   workers/<id>/stop             asks this worker to leave after its request in progress
//   workers/<id>/dead             written by a janitor that declared the worker dead; a worker that
//                                 finds it (it was only frozen) leaves without answering
//   queue/<name>                  pending requests; <name> = <20-digit ns timestamp>-<request id>.json,
//                                 so the name order is the submission order (FIFO)
//   responses/<request id>.json   the answer (written once, atomically)
//   cancel/<request id>           asks the worker to abandon that request (answered "cancelled")
//   stop                          asks every worker of the folder to leave (the run is over)
//
// Every file is written to a temporary name and renamed (base/atomic_file.h), so a reader never sees
// half of one. A request is claimed by rename(queue/<name>, workers/<id>/claimed/<name>): rename is
// atomic, so exactly one worker gets it.
//
// Death: a worker whose heartbeat sequence has not moved for dead_after_s (measured on the janitor's
// own clock, so hosts need no synchronised clocks), or whose pid is gone on this host, is dead. Any
// client may run the janitor (Client::requeue_dead); it marks the worker dead and moves each of its
// claimed requests back to queue/ with "attempt" + 1 (first renaming it aside, so two janitors never
// queue one request twice). A request that has killed max_attempts workers is answered with an error
// instead of being queued again. A worker that is stopped by SIGTERM/SIGINT (pre-emption) puts its
// request in progress back itself before it leaves.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "workers/messages.h"

namespace autooptim::workers {

constexpr int kProtocolVersion = 1;

// Request kinds (request["kind"]) and their fields (read and written only by the structs of
// workers/messages.h, which refuse a missing or mistyped key); every request also has "id", "client", "attempt",
// "submitted" (UTC) and optionally "worker" (only that worker may claim it) and "model" (a worker of
// another model refuses it with an error).
//  "trial"     executors' measurement: {"base": manifest, "flags": {...}, "label": s, "prompts": [{id, text,
//              category, splits}], "n": k} -> result: executors::Trial as JSON (baseline and candidate
//              interleaved on the first n prompts, PSNR against the baseline's clip, engagement problems)
//  "traces"    a calibration run: {"base", "flags", "label", "prompts", "n"} -> {"traces": [trace...]}
//  "screen"    stage timing of a candidate against its baseline at the run's shape: {"base", "manifest",
//              "forwards": k, "skip_ratio": r|null} -> {"base_forward_s", "cand_forward_s", "decode": bool,
//              "base_decode_s", "cand_decode_s", "base_estimate_s", "cand_estimate_s", "estimated_speedup"}
//  "calibrate" one forward and one decode of the baseline at its shape (run --plan): {"base"} ->
//              {"text_s", "forward_s", "decode_s", "forwards_per_clip", "clip_estimate_s"}
//  "gate"      a whole gate run (gates::run_gate, baseline and candidate on this one worker): {"manifest",
//              "split", "out_dir", "settings": GateSettings as JSON, "ledger": path|null} -> verdict JSON
// Every response: {"id", "kind", "worker", "ok": bool, "error": s (when not ok), "cancelled": bool,
// "result": {...} (when ok), "busy_s" (wall time on the worker), "generating_s" (of it, inside the pipeline's
// generate / forward / decode), "generations", "peak_rss_kb", "attempt", "finished" (UTC)}; one a janitor
// wrote for a request that killed max_attempts workers has no counters (busy_s ... peak_rss_kb). Read and
// written only by workers::Response (messages.h).

struct Layout {
  std::string run;  // the run folder
  std::string workers() const;
  std::string worker(const std::string& id) const;
  std::string queue() const;
  std::string responses() const;
  std::string cancel() const;
  std::string stop_all() const;
};

// A worker as registered (worker.json) plus what its heartbeat says.
struct WorkerInfo {
  std::string id;
  std::string state;  // loading | ready | stopped | failed | dead
  std::string host;
  int64_t pid = 0;
  std::string device;       // "cuda" | "cpu"
  std::string device_name;  // "NVIDIA H200", "cpu (16 threads)"
  std::string model, weights, weights_id, build;
  nlohmann::json registration;  // worker.json as written
  nlohmann::json heartbeat;     // heartbeat.json as last read (null before the first)
};

struct ClientOptions {
  double dead_after_s = 30;  // heartbeat silence that makes a worker dead
  int max_attempts = 3;      // workers a request may kill before it is answered with an error
  double no_worker_s = 600;  // waiting with no worker registered, loading or ready: an Error
  double poll_s = 0.05;      // how often wait() looks for the response
};

// A process that sends requests. Thread-compatible (one per thread).
class Client {
 public:
  Client(std::string run_dir, std::string client_name, ClientOptions options = {});
  // Queues a request (kind and fields as above); returns its id.
  std::string submit(nlohmann::json request);
  // The response when it is there.
  std::optional<nlohmann::json> poll(const std::string& id) const;
  // Waits for the response; runs the janitor about once a second. `tick` (may be empty) is called
  // every poll; an exception it throws cancels the request and propagates. Throws Error when no worker
  // is registered for options.no_worker_s, or every registered one failed or stopped.
  nlohmann::json wait(const std::string& id, const std::function<void()>& tick = {});
  // submit + wait, the response read as a Response (messages.h: a missing or mistyped key is an Error naming
  // it); throws Error(response.error) when the response is not ok.
  Response call(nlohmann::json request, const std::function<void()>& tick = {});
  void cancel(const std::string& id);
  // Registered workers (any state), by id.
  std::vector<WorkerInfo> workers() const;
  // The janitor: declares silent workers dead and re-queues their claimed requests; returns the
  // number of requests re-queued.
  int requeue_dead();
  const Layout& layout() const { return layout_; }

 private:
  Layout layout_;
  std::string name_;
  ClientOptions opt_;
  int64_t seq_ = 0;
  struct Seen {
    int64_t seq = -1;
    double since = 0;  // steady seconds when seq last moved
  };
  std::map<std::string, Seen> seen_;
  double last_janitor_ = -1;
};

// Withdraws the queued requests of one client and asks the workers to abandon its claimed ones (a
// client that died or was killed: nobody waits for them).
void cancel_client_requests(const std::string& run_dir, const std::string& client_name);
// Writes RUN/stop (every worker leaves after its request in progress).
void stop_all(const std::string& run_dir);
// Reads a JSON file; nullopt when it does not exist or does not parse (yet).
std::optional<nlohmann::json> read_json_file(const std::string& path);

}  // namespace autooptim::workers
