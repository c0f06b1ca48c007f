#pragma once
// The red team: what the switches of RedTeamOptions (redteam/redteam_options.h) do to a generation, as the
// pipeline's interceptor (runtime/pipeline_interceptor.h). Each is a cheat that the gate harness must catch
// (docs/gate-defences.md). A worker installs one on each of its pipelines only when it allows red-team flags
// (the harness's own tests) and sets the switches of every manifest before running it; an honest process
// never makes one.
#include <ATen/ATen.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "redteam/redteam_options.h"
#include "runtime/pipeline_interceptor.h"

namespace autooptim::redteam {

class RedTeam final : public runtime::PipelineInterceptor {
 public:
  RedTeam() = default;
  ~RedTeam() override;  // waits for a prefetch, late-writing or standing thread still running

  // The switches of the manifest whose generations come next (none: the red team still watches, as it
  // remembers the baseline's clips and sandbags the off path once armed).
  void set_switches(const RedTeamOptions& s) { switches_ = s; }
  const RedTeamOptions& switches() const { return switches_; }

  // A clip to return at once (written early, replayed, prefetched, written late), else nullopt.
  std::optional<runtime::GenerateResult> before_generation(runtime::WanPipeline& pipe, const runtime::RuntimeOptions& o,
                                                           const runtime::GenerateParams& p,
                                                           at::Tensor* out_video) override;
  // Remembers clips, reverses time, inflates counters, starts a prefetch.
  void after_generation(runtime::WanPipeline& pipe, const runtime::RuntimeOptions& o, const runtime::GenerateParams& p,
                        runtime::GenerateResult& r) override;
  // text_cache: the prompt's embeddings from the first run that encoded it (encoding it then, counted in
  // *tokens_run as an honest run counts); later runs get them without encoding and count nothing.
  at::Tensor text_embeddings(runtime::WanPipeline& pipe, const runtime::RuntimeOptions& o, const std::string& prompt,
                             int64_t* tokens_saved, int64_t* tokens_run) override;
  // fewer_steps: half the steps asked for.
  int64_t denoising_steps(const runtime::RuntimeOptions& o, int64_t requested) override;
  // The sandbag: three discarded forwards per forward once armed, when every technique is off.
  int discarded_forwards(const runtime::RuntimeOptions& o) override;
  // skip_warmup: every cache policy warms up for one step, whatever its options declare.
  void cache_policy_options(runtime::RuntimeOptions& cache_options) override;
  // sparse_skip_dense: sparse from the first step and layer, whatever is declared.
  void sparse_dense_work(runtime::SparseAttentionOptions& sparse) override;
  // off_leak: a perturbation that survives with every technique off.
  void decoded(const runtime::RuntimeOptions& o, at::Tensor& video) override;

 private:
  void join_prefetch();
  void join_late();
  // standing_thread: starts it once; queues a job on it; waits until it has nothing left to do.
  void start_standing_thread();
  void post_to_standing_thread(std::function<void()> job);
  void wait_standing_thread_idle();
  void stop_standing_thread();
  RedTeamOptions switches_;
  std::map<std::string, at::Tensor> early_;                     // write_output_early
  std::map<std::string, at::Tensor> baseline_;                  // replay_baseline: clips with every technique off
  std::map<std::string, std::pair<at::Tensor, int64_t>> text_;  // text_cache: embeddings and tokens saved
  bool sandbag_armed_ = false;
  int spiked_runs_ = 0;  // load_spike
  std::thread prefetch_thread_;
  std::thread late_thread_;  // write_output_late
  std::mutex prefetch_mutex_;
  std::string prefetch_key_;
  std::shared_ptr<runtime::GenerateResult> prefetched_;
  std::thread standing_thread_;
  std::mutex standing_mutex_;
  std::condition_variable standing_cv_;
  std::function<void()> standing_job_;  // the one job queued or running (empty: idle)
  bool standing_stop_ = false;
};

}  // namespace autooptim::redteam
