#pragma once
// The messages between the gate and a generation worker (gates/sandboxed_worker.h): a process the gate does
// not trust that runs manifests for it, one request at a time, through two FIFOs. A message is one line of
// JSON (at most kMaxHeaderBytes), then, when its header has "video_shape": [T, 3, H, W], exactly T*3*H*W
// float32 values (native byte order: both ends are on one host). The reader says which shape it expects and
// refuses any other, so a worker cannot make the gate read more than the clip it asked for.
//
// Requests: {"kind": "describe"} -> {"ok", "plugin": sha256 | "", "techniques": [the plugin's techniques as the
//           registry lists them, with "group"]}
//           {"kind": "run", "manifest": resolved manifest, "prompt": {"id", "category", "text"}, "seed": n}
//           -> {"ok", "error", "worker_seconds", "pre_sync_s", "trace": {counter: value}, "times": StageTimes}
//           and the clip
//           {"kind": "stop"} -> no answer; the worker leaves.
#include <ATen/ATen.h>

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/trace.h"
#include "runtime/wan_pipeline.h"

namespace autooptim::gates {

inline constexpr size_t kMaxHeaderBytes = 1 << 20;

struct WireMessage {
  nlohmann::json header;
  at::Tensor video;  // [T, 3, H, W] float32 on the CPU, or undefined
};

// Called while a read waits (every ~100 ms): "" to go on waiting, else why to give up (the peer died, a
// deadline passed); the read then throws an Error with that reason.
using WaitCheck = std::function<std::string()>;

// Writes `header` (and `video`, float32, contiguous on the CPU) to fd. Throws Error when the fd fails.
void write_message(int fd, nlohmann::json header, const at::Tensor& video = {});
// Reads one message. `video_shape`: the shape a clip in it must have ([T, 3, H, W]), or empty when none may come.
// Throws Error on a malformed or oversized header, a clip of another shape, end of file, or `check`'s reason.
WireMessage read_message(int fd, const std::vector<int64_t>& video_shape, const WaitCheck& check);

// A run's stage times and counters as the worker sends them, and back.
nlohmann::json stage_times_to_json(const runtime::StageTimes& t);
runtime::StageTimes stage_times_from_json(const nlohmann::json& j);
// The counters and ratios of a trace (runtime::Trace::to_json) as plain counters (a ratio arrives as its value).
// Strict: a value that is not a number is an Error naming `whose` counter (a worker's answer that does not read).
runtime::Trace trace_from_json(const nlohmann::json& j, const std::string& whose = "the generation worker's");

}  // namespace autooptim::gates
