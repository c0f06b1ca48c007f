#pragma once
// The red-team hooks: what the switches of RedTeamOptions (options.h) do inside the runtime. Each is a
// cheat that the gate harness must catch (docs/gate-defences.md); none is reachable from a manifest
// unless red-team flags are allowed (the harness's own tests), and none keeps any state otherwise.
// WanPipeline::generate calls before() and after() around every honest generation.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/options.h"

namespace autooptim::runtime {

class WanPipeline;
struct GenerateParams;
struct GenerateResult;

// True when every technique switch is at its default: the path the baseline and the off run take.
bool techniques_off(const RuntimeOptions& o);

class RedTeam {
 public:
  RedTeam() = default;
  RedTeam(const RedTeam&) = delete;
  RedTeam& operator=(const RedTeam&) = delete;
  ~RedTeam();  // waits for a prefetch thread still running

  // Before a generation under `o`: a clip to return at once (written early, replayed, prefetched),
  // else nullopt and the pipeline generates honestly.
  std::optional<GenerateResult> before(WanPipeline& pipe, const RuntimeOptions& o, const GenerateParams& p,
                                       at::Tensor* out_video);
  // After an honest generation: remembers clips, inflates counters, starts a prefetch.
  void after(WanPipeline& pipe, const RuntimeOptions& o, const GenerateParams& p, GenerateResult& r);
  // Discarded transformer forwards to add per forward (the sandbag): 0 unless armed and every
  // technique is off.
  int extra_forwards(const RuntimeOptions& o) const;
  // text_cache: the prompt's embeddings from the first run that encoded it (encoding it then, counted in
  // *tokens_run as an honest run counts), later runs get them without encoding and count nothing.
  at::Tensor remembered_text(WanPipeline& pipe, const std::string& prompt, bool trim, int64_t* tokens_saved, int64_t* tokens_run);

 private:
  void join_prefetch();
  void join_late();
  std::map<std::string, at::Tensor> early_;     // write_output_early
  std::map<std::string, at::Tensor> baseline_;  // replay_baseline: clips made with every technique off
  std::map<std::string, std::pair<at::Tensor, int64_t>> text_;  // text_cache: embeddings and tokens saved
  bool sandbag_armed_ = false;
  int spiked_runs_ = 0;  // load_spike
  std::thread prefetch_thread_;
  std::thread late_thread_;  // write_output_late
  std::mutex prefetch_mutex_;
  std::string prefetch_key_;
  std::shared_ptr<GenerateResult> prefetched_;  // (GenerateResult is incomplete here)
};

}  // namespace autooptim::runtime
