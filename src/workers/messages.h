#pragma once
// The messages between the processes that hold no model (orchestrator, executors) and the workers that
// do (protocol.h): each request's fields, and the results the workers send back, as structs read and
// written here and nowhere else. The JSON on the wire is what protocol.h describes. Reading is strict:
// a missing key or a value of the wrong type is an Error naming the key and the message; a key that a
// message may leave out is an std::optional here, and null on the wire.
//
// The envelope every request carries (id, client, attempt, submitted, protocol; optionally worker and
// model) is the protocol's (Client::submit, the server's claim loop), not these structs'.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gates/manifest.h"
#include "gates/prompts.h"

namespace autooptim::workers {

// Reads the keys of one message, each throwing an Error that names the message and the key:
// "<message>: missing key '<key>'", "<message>: key '<key>': expected an integer, got \"3\"".
class MessageReader {
 public:
  // Throws unless `j` is an object.
  MessageReader(const nlohmann::json& j, std::string message);

  const nlohmann::json& at(const std::string& key) const;  // any type
  std::string string(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;  // an integer or a floating-point value
  bool boolean(const std::string& key) const;
  const nlohmann::json& object(const std::string& key) const;
  const nlohmann::json& array(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;  // an array of strings
  std::optional<double> number_or_null(const std::string& key) const;
  std::optional<std::string> string_or_null(const std::string& key) const;
  // A manifest (strictly parsed, errors labelled `label`).
  gates::Manifest manifest(const std::string& key, const std::string& label) const;
  // Reads the key "kind" and throws unless it is one of `kinds`.
  std::string kind(const std::vector<std::string>& kinds) const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const std::string& message() const { return message_; }

 private:
  const nlohmann::json& j_;
  std::string message_;
};

// The technique plugin a request's candidate runs (issue 42): its file, in the run folder (the worker hashes what it
// reads), and whether its sandboxed generation worker may be a plain process on a machine with no OS sandbox.
// On the wire "plugin": {"file", "without_sandbox"}, or null for none.
struct PluginRef {
  std::string file;
  bool without_sandbox = false;
  bool empty() const { return file.empty(); }
  // The "plugin" of a request's JSON (none where the key is absent or null); Error naming the key otherwise.
  static PluginRef of_request(const nlohmann::json& request, const std::string& message);
};

// "trial" (an executor's measurement: the baseline and the candidate interleaved on the first n prompts)
// and "traces" (a calibration run of the candidate alone): {"kind", "model", "base", "flags", "label",
// "prompts": [{"id", "text", "category", "splits"}], "n", "plugin"}.
struct TrialRequest {
  std::string kind = "trial";  // trial | traces
  gates::Manifest base;        // the run's baseline; "model" on the wire is its model
  nlohmann::json flags = nlohmann::json::object();
  std::string label;
  std::vector<gates::Prompt> prompts;  // visible prompts only
  int64_t n = 1;
  PluginRef plugin;  // the flags turn on this plugin's techniques: the candidate runs in its sandboxed worker

  nlohmann::json to_json() const;
  static TrialRequest from_json(const nlohmann::json& j);
};

// "screen": stage timing of a candidate against its baseline at the run's shape:
// {"kind", "model", "base", "manifest", "forwards", "skip_ratio": number|null}.
struct ScreenRequest {
  gates::Manifest base;  // "model" on the wire is the candidate's model
  gates::Manifest manifest;
  int64_t forwards = 3;
  std::optional<double> skip_ratio;  // the step cache's measured skip ratio; unset when nobody measured it

  nlohmann::json to_json() const;
  static ScreenRequest from_json(const nlohmann::json& j);
};

// "calibrate": one forward and one decode of the baseline at its shape: {"kind", "model", "base"}.
struct CalibrateRequest {
  gates::Manifest base;

  nlohmann::json to_json() const;
  static CalibrateRequest from_json(const nlohmann::json& j);
};

// "gate": a whole gate run on one worker: {"kind", "model", "manifest", "split", "out_dir", "settings",
// "ledger": path|null, "plugin"}. settings is gates::settings_to_json's object (read by gates::settings_from_json,
// with "baseline_manifest" when the run's baseline is not at the official configuration).
struct GateRequest {
  gates::Manifest manifest;
  std::string split;
  std::string out_dir;
  nlohmann::json settings = nlohmann::json::object();
  std::optional<std::string> ledger;
  PluginRef plugin;  // the file of the plugin the manifest pins

  nlohmann::json to_json() const;
  static GateRequest from_json(const nlohmann::json& j);
};

// The result of "calibrate".
struct CalibrateResult {
  double text_s = 0, forward_s = 0, decode_s = 0;
  int64_t forwards_per_clip = 0;
  double clip_estimate_s = 0;
  double worker_load_s = 0;
  nlohmann::json config = nlohmann::json::object();  // the baseline's RunConfig (gates::to_json)

  nlohmann::json to_json() const;
  static CalibrateResult from_json(const nlohmann::json& j);
};

// The result of "screen". estimated_speedup is unset (null) for a step cache without a measured skip
// ratio, with `unbounded` saying why.
struct ScreenResult {
  double base_forward_s = 0, cand_forward_s = 0;
  bool decode = false;  // the candidate's techniques touch the decoder: decodes were timed
  double base_decode_s = 0, cand_decode_s = 0;
  double text_s = 0;
  int64_t forwards_per_clip = 0;
  std::optional<double> skip_ratio;
  double base_estimate_s = 0, cand_estimate_s = 0;
  std::optional<double> estimated_speedup;
  std::optional<std::string> unbounded;  // absent on the wire when unset

  nlohmann::json to_json() const;
  static ScreenResult from_json(const nlohmann::json& j);
};

// The result of "gate": the verdict as gates::GateVerdict::to_json writes it (gates/gate.h), readable
// without the gates' library. Its checks by name: artifacts, official_config, performance, off_identity,
// quality, visual, authenticity.
struct GateCheckResult {
  bool pass = false;
  std::string reason;
  nlohmann::json details = nlohmann::json::object();
};

struct GateVerdictResult {
  std::string manifest;  // the candidate's id
  std::string manifest_hash;
  std::string split;
  bool accepted = false;
  bool refused = false;  // a retry of an already-rejected manifest
  double baseline_seconds = 0, candidate_seconds = 0, speedup = 0;
  double psnr = 0, ssim = 0;
  std::string failure_signature;
  std::string baseline_hash;
  nlohmann::json integrity = nlohmann::json::object();
  std::map<std::string, GateCheckResult> gates;

  nlohmann::json to_json() const;
  static GateVerdictResult from_json(const nlohmann::json& j);
};

// The answer to any request, as responses/<request id>.json holds it (protocol.h). Two writers: the worker
// that ran the request (Server::serve_one), and a janitor that gave the request up after it killed
// max_attempts workers (Client::requeue_dead), which has no counters to give. On the wire: {"id", "kind",
// "worker", "attempt", "ok", "cancelled", "finished", "result" (only when ok), "error" (only when not ok),
// and the worker's counters "busy_s", "generating_s", "generations", "peak_rss_kb" (only from a worker)}.
struct Response {
  // What the worker spent on the request.
  struct Counters {
    double busy_s = 0;        // wall time on the worker
    double generating_s = 0;  // of it, inside the pipeline's generate / forward / decode
    int64_t generations = 0;
    int64_t peak_rss_kb = 0;  // the worker's, so far
  };

  std::string id;  // the request's
  std::string kind;
  std::string worker;  // the worker that ran it (or the last one that died running it)
  int64_t attempt = 0;
  bool ok = false;
  bool cancelled = false;                            // abandoned at its client's request (not ok)
  nlohmann::json result = nlohmann::json::object();  // the kind's result (when ok)
  std::string error;                                 // why not (when not ok)
  std::string finished;                              // UTC
  std::optional<Counters> counters;                  // unset when a janitor answered

  // Wall time on the worker, 0 when a janitor answered.
  double busy_s() const { return counters ? counters->busy_s : 0.0; }

  nlohmann::json to_json() const;
  // `message` names the response in errors ("response to <id>").
  static Response from_json(const nlohmann::json& j, const std::string& message = "worker response");
};

// A prompt as a trial request carries it.
nlohmann::json prompt_to_json(const gates::Prompt& p);
gates::Prompt prompt_from_json(const nlohmann::json& j, const std::string& message);

}  // namespace autooptim::workers
