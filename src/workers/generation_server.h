#pragma once
// The generation worker's side (`autooptim worker --generation-channel DIR [--plugin FILE]`): the process the
// gate starts, in the OS sandbox, to run a plugin's manifests (or the pinned baseline's, beside it) without
// loading the plugin itself (gates/sandboxed_worker.h). It loads the plugins first, then answers the gate's
// requests from DIR/requests on DIR/answers, one at a time (gates/generation_wire.h): "hello" (which plugin
// it loaded), "describe" (its techniques), "load" (the model, before any timed run), "run", "stop".
#include <string>
#include <vector>

#include "runtime/models.h"

namespace autooptim::workers {

struct GenerationServerOptions {
  std::string channel;  // the folder holding the FIFOs "requests" and "answers"
  std::vector<std::string> plugins;
  runtime::LoadRequest load;
};

// Serves until "stop" or the gate goes; returns the exit status (0 stopped, 2 could not start).
int serve_generations(const GenerationServerOptions& options);

}  // namespace autooptim::workers
