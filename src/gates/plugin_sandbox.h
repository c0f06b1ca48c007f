#pragma once
// The OS sandbox in which this binary runs a plugin's code (issue 42): the binary and the libraries it maps, the
// weights and a copy of the plugin read-only, a workspace of its own, on a GPU the device nodes (and /sys, where
// the CUDA driver reads the topology); none of the run's folders and no network. A plugin's generation worker
// runs in it (gates/sandboxed_worker.h), and so does the deploy check's `generate` of a plugin's tier
// (orchestrator/plugin_deploy.h). Without an OS sandbox (`unsandboxed`) the same command runs as a plain process
// of its own, with the host's paths.
#include <sys/types.h>

#include <string>
#include <vector>

#include "base/sandbox.h"

namespace autooptim::gates {

struct PluginProcess {
  std::string binary;        // the autooptim binary to run ("" this process's own; a test names the real one)
  std::string workspace;     // host folder, /workspace inside (HOME and the working directory)
  std::string channel;       // host folder, /channel inside ("" none)
  std::string weights_dir;   // host folder of the checkpoint ("" none: the embedded or synthetic weights)
  std::string plugin_copy;   // host path of a copy this process hashed ("" none)
  bool cuda = false;         // bind the GPU's device nodes and /sys
  std::string cuda_visible;  // CUDA_VISIBLE_DEVICES inside ("" this process's own, if any)
  bool unsandboxed = false;
  uid_t uid_when_root = 65529;
};

// A read-only copy of the plugin `file` in `dir`, named <sha256>.so and checked to hash as `sha256`: the file the
// caller hashed is the file the process loads, whatever happens to the original. Error when it differs.
std::string copy_plugin(const std::string& file, const std::string& sha256, const std::string& dir);

// Where the process finds each of these: inside the sandbox, or the host's path without one.
std::string plugin_process_binary(const PluginProcess& p);
std::string plugin_process_weights(const PluginProcess& p);
std::string plugin_process_plugin(const PluginProcess& p);
std::string plugin_process_folder(const PluginProcess& p, const std::string& host_folder);  // workspace/channel

// The sandbox's specification for `argv` (written with the paths above): binds, devices, environment (the
// variables a generation needs, AUTOOPTIM_GENERATION_WORKER=1, idle threads that sleep), limits.
base::SandboxSpec plugin_process_spec(const PluginProcess& p, std::vector<std::string> argv, std::string log_file);

}  // namespace autooptim::gates
