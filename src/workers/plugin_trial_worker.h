#pragma once
// The candidate's side of an executor's trials of a plugin's manifest (issue 42). The worker server never loads a
// plugin: it keeps one sandboxed generation worker that does (gates/sandboxed_worker.h), started at the first trial
// of that plugin and kept for the next ones, replaced for another plugin, and let go before a gate run (which starts
// a pair of its own) and when the server leaves. The baseline of those trials runs in the server's own worker.
#include <memory>
#include <string>

#include "gates/sandboxed_worker.h"
#include "workers/messages.h"

namespace autooptim::workers {

class PluginTrialWorker {
 public:
  // The worker that runs plugin `p` (sha256 `sha`) with the model of `load`, started, loaded and warmed up (an
  // untimed short generation of `cand` on `prompt`) where it is not yet; a generation of it that runs past
  // `run_timeout_s` fails and kills it (the next trial starts a new one).
  gates::GenerationSide& side(const PluginRef& p, const std::string& sha, const runtime::LoadRequest& load,
                              double run_timeout_s, const gates::Manifest& cand, const gates::Prompt& prompt);
  // Stops the worker (its memory on the device is free again).
  void release();

 private:
  std::unique_ptr<gates::SandboxedWorker> w_;
  std::string sha_;
};

}  // namespace autooptim::workers
