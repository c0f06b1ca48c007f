#include "workers/plugin_trial_worker.h"

#include "base/error.h"
#include "gates/gate_run.h"

namespace autooptim::workers {

gates::GenerationSide& PluginTrialWorker::side(const PluginRef& p, const std::string& sha,
                                               const runtime::LoadRequest& load, double run_timeout_s,
                                               const gates::Manifest& cand, const gates::Prompt& prompt) {
  if (w_ && (sha_ != sha || !w_->alive())) release();
  if (!w_) {
    w_ = gates::start_plugin_candidate(load, p.file, p.without_sandbox, run_timeout_s);
    sha_ = w_->plugin_sha256();
    if (sha_ != sha) {
      release();
      throw Error("the plugin " + p.file + " changed while its trial started (" + sha + " was asked for)");
    }
    const gates::RunOutput warm =
        w_->run(gates::warmup_manifest(cand, gates::GateSettings{}.warmup_steps), prompt, std::nullopt);
    if (!warm.error.empty()) {
      release();
      throw Error("the plugin's warm-up run failed: " + warm.error);
    }
  }
  w_->set_run_timeout(run_timeout_s);
  return *w_;
}

void PluginTrialWorker::release() {
  w_.reset();
  sha_.clear();
}

}  // namespace autooptim::workers
