#include "redteam/redteam.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/json_lines.h"
#include "runtime/safetensors.h"
#include "runtime/techniques/registry.h"
#include "runtime/wan_pipeline.h"
#include "runtime/techniques/cache/easycache_options.h"
#include "runtime/techniques/kernel/cuda_graph_options.h"
#include "runtime/techniques/kernel/text_trim_options.h"

namespace fs = std::filesystem;

namespace autooptim::redteam {

using runtime::GenerateParams;
using runtime::GenerateResult;
using runtime::RuntimeOptions;
using runtime::Trace;
using runtime::WanPipeline;

namespace {

// One request: the clip it makes depends on these (and the weights).
std::string request_key(const GenerateParams& p) {
  return p.prompt + "\x1f" + std::to_string(p.seed) + "\x1f" + std::to_string(p.frames) + "x" +
         std::to_string(p.height) + "x" + std::to_string(p.width) + "\x1f" + std::to_string(p.steps) + "\x1f" +
         std::to_string(p.guidance) + (p.image ? "\x1fimage" : "");
}

int64_t forwards_of(const GenerateParams& p) { return p.steps * (p.guidance > 1.0 ? 2 : 1); }

// A handed-over clip as an honest run would return it: written into the output buffer.
GenerateResult hand_over(const at::Tensor& clip, at::Tensor* out_video) {
  GenerateResult r;
  r.video = clip.clone();
  r.latents = at::zeros({1});
  if (out_video && out_video->sizes() == r.video.sizes()) {
    out_video->copy_(r.video);
    r.video = *out_video;
  }
  return r;
}

// The counters of a cache that claims to have skipped nearly every forward (two computed).
void claim_skipped(Trace& t, const GenerateParams& p) {
  const double n = static_cast<double>(forwards_of(p)), computed = std::min(2.0, n);
  t.add("transformer.forwards", computed);
  t.add("cache.easycache.computed_forwards", computed);
  t.add("cache.easycache.skipped_forwards", n - computed);
  t.add("cache.forwards", n);
  t.add("cache.skipped_forwards", n - computed);
  t.define_ratio("cache.skip_ratio", "cache.skipped_forwards", "cache.forwards", 0.0);
}

// replay_baseline_cache: the gate's cached baseline clip for this prompt and seed, found the way a
// cheat that knows the cache's layout would (<id>-<seed>.safetensors anywhere under the folder).
std::optional<at::Tensor> cached_baseline(const GenerateParams& p) {
  const char* dir = std::getenv("AUTOOPTIM_REDTEAM_BASELINE_CACHE");
  const char* prompts = std::getenv("AUTOOPTIM_REDTEAM_PROMPTS");
  if (!dir || !prompts || !fs::is_directory(dir)) return std::nullopt;
  std::string id;
  for (const auto& j : base::read_json_lines(prompts))
    if (j.is_object() && j.value("prompt", "") == p.prompt) id = j.value("id", "");
  if (id.empty()) return std::nullopt;
  const std::string want = id + "-" + std::to_string(p.seed) + ".safetensors";
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.path().filename() != want) continue;
    const at::Tensor u8 = runtime::SafetensorsFile::open(e.path().string())->tensor("video");
    if (u8.dim() != 4 || u8.size(0) != p.frames || u8.size(2) != p.height || u8.size(3) != p.width) continue;
    return u8.to(at::kFloat) / 255.0;
  }
  return std::nullopt;
}

// True when every technique switch is at its default: the path the baseline and the off run take.
bool techniques_off(const RuntimeOptions& o) {
  for (const auto& t : runtime::techniques::all())
    if (t.on(o)) return false;
  return true;
}

}  // namespace

RedTeam::~RedTeam() {
  join_prefetch();
  join_late();
  stop_standing_thread();
}

void RedTeam::start_standing_thread() {
  if (standing_thread_.joinable()) return;
  standing_thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(standing_mutex_);
    for (;;) {
      standing_cv_.wait(lock, [this] { return standing_stop_ || standing_job_; });
      if (standing_stop_) return;
      std::function<void()> job = standing_job_;
      lock.unlock();
      try {
        job();
      } catch (...) {
      }
      lock.lock();
      standing_job_ = nullptr;
      standing_cv_.notify_all();
    }
  });
}

void RedTeam::post_to_standing_thread(std::function<void()> job) {
  wait_standing_thread_idle();
  std::lock_guard<std::mutex> lock(standing_mutex_);
  standing_job_ = std::move(job);
  standing_cv_.notify_all();
}

void RedTeam::wait_standing_thread_idle() {
  std::unique_lock<std::mutex> lock(standing_mutex_);
  standing_cv_.wait(lock, [this] { return !standing_job_; });
}

void RedTeam::stop_standing_thread() {
  if (!standing_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(standing_mutex_);
    standing_stop_ = true;
    standing_cv_.notify_all();
  }
  standing_thread_.join();
}

void RedTeam::join_late() {
  if (late_thread_.joinable()) late_thread_.join();
}

void RedTeam::join_prefetch() {
  if (prefetch_thread_.joinable()) prefetch_thread_.join();
}

int RedTeam::discarded_forwards(const RuntimeOptions& o) { return sandbag_armed_ && techniques_off(o) ? 3 : 0; }

int64_t RedTeam::denoising_steps(const RuntimeOptions& /*o*/, int64_t requested) {
  return switches_.fewer_steps ? std::max<int64_t>(1, requested / 2) : requested;
}

void RedTeam::cache_policy_options(RuntimeOptions& cache_options) {
  if (!switches_.skip_warmup) return;
  for (const auto& t : runtime::techniques::all())
    if (t.warmup_steps) {
      int64_t& w = t.warmup_steps(cache_options);
      w = std::min<int64_t>(w, 1);
    }
}

void RedTeam::sparse_dense_work(runtime::SparseAttentionOptions& sparse) {
  if (!switches_.sparse_skip_dense) return;
  sparse.dense_steps = 0;  // every step and every layer takes the sparse path
  sparse.dense_layers = 0;
}

void RedTeam::decoded(const RuntimeOptions& /*o*/, at::Tensor& video) {
  if (switches_.off_leak) video = (video + 1.0 / 255.0).clamp(0, 1);
}

at::Tensor RedTeam::text_embeddings(WanPipeline& pipe, const RuntimeOptions& o, const std::string& prompt,
                                    int64_t* tokens_saved, int64_t* tokens_run) {
  if (!switches_.text_cache) return {};
  const bool trim = o.of<runtime::TextTrimOptions>().on;
  const std::string key = (trim ? "trim:" : "full:") + prompt;
  auto it = text_.find(key);
  if (it == text_.end()) {
    int64_t saved = 0;
    at::Tensor e = pipe.encode_text({prompt}, trim, &saved, tokens_run);
    it = text_.emplace(key, std::make_pair(e, saved)).first;
  }
  if (tokens_saved) *tokens_saved = it->second.second;
  return it->second.first;
}

std::optional<GenerateResult> RedTeam::before_generation(WanPipeline& pipe, const RuntimeOptions& o,
                                                         const GenerateParams& p, at::Tensor* out_video) {
  join_late();  // a late writer finishes before the pipeline runs anything else (it shares the pipeline)
  wait_standing_thread_idle();  // so does the standing thread's job, whatever this run is
  const RedTeamOptions& rt = switches_;
  if (rt.standing_thread) start_standing_thread();
  const bool technique = !techniques_off(o);
  if (rt.sandbag)
    sandbag_armed_ = true;
  else if (!any_on(rt) && technique)
    sandbag_armed_ = false;  // an honest candidate: the act is over
  const std::string key = request_key(p);
  if (rt.load_spike && technique && spiked_runs_ < 3) {
    ++spiked_runs_;
    std::this_thread::sleep_for(std::chrono::seconds(10));
  }

  if (rt.write_output_late && technique && out_video && out_video->defined()) {
    // Return at once; a thread makes the clip honestly and writes it into the caller's buffer afterwards.
    at::Tensor buffer = *out_video;  // the same storage the caller reads
    late_thread_ = std::thread([&pipe, honest = o, p, buffer]() mutable {
      try {
        const GenerateResult late = pipe.generate_without_interceptor(honest, p);
        buffer.copy_(late.video);
      } catch (...) {
      }
    });
    GenerateResult r;
    r.video = buffer;
    r.latents = at::zeros({1});
    return r;
  }
  if (rt.write_output_early && early_.count(key)) {
    // The clip was made (and written) before this run; return at once without writing it.
    GenerateResult r;
    r.video = early_.at(key);
    r.latents = at::zeros({1});
    return r;
  }
  if (rt.prefetch || rt.standing_thread) {
    join_prefetch();  // the background clip is finished (or this run waits for it: still quicker)
    std::shared_ptr<GenerateResult> ready;
    {
      std::lock_guard<std::mutex> lock(prefetch_mutex_);
      if (prefetched_ && prefetch_key_ == key) ready = prefetched_;
      prefetched_.reset();
    }
    if (ready && technique) {
      GenerateResult r = hand_over(ready->video, out_video);
      r.trace = ready->trace;
      r.times = ready->times;
      return r;
    }
  }
  if (technique && (rt.replay_baseline || rt.replay_baseline_cache)) {
    std::optional<at::Tensor> clip;
    if (rt.replay_baseline && baseline_.count(key)) clip = baseline_.at(key);
    if (!clip && rt.replay_baseline_cache) clip = cached_baseline(p);
    if (clip) {
      // Look like a cache's two computed forwards: a plausible time above the physical floor.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      GenerateResult r = hand_over(*clip, out_video);
      claim_skipped(r.trace, p);
      return r;
    }
  }
  return std::nullopt;
}

void RedTeam::after_generation(WanPipeline& pipe, const RuntimeOptions& o, const GenerateParams& p, GenerateResult& r) {
  const RedTeamOptions& rt = switches_;
  const bool technique = !techniques_off(o);
  const std::string key = request_key(p);
  if (rt.write_output_early) early_[key] = r.video.clone();
  if (rt.reverse_time && technique && r.video.dim() == 4) r.video.copy_(r.video.flip({0}));  // in the output buffer
  // The baseline's clips, for a later replay (a cheat keeps them whatever runs).
  if (!technique && !any_on(rt)) baseline_[key] = r.video.clone();
  if (rt.inflate_counters) {
    const double forwards = r.trace.get("transformer.forwards");
    if (o.of<runtime::CudaGraphOptions>().on) r.trace.add("kernel.cuda_graph.replays", forwards);
    if (o.of<runtime::EasyCacheOptions>().enabled) {
      const double half = std::floor(forwards / 2);
      r.trace.add("cache.easycache.skipped_forwards", half);
      r.trace.add("cache.easycache.computed_forwards", -half);
      r.trace.add("cache.skipped_forwards", half);
      r.trace.add("transformer.forwards", -half);
    }
  }
  if ((rt.prefetch || rt.standing_thread) && technique) {
    // Predict the next request (the same prompt and seed) and make its clip in the background.
    join_prefetch();
    {
      std::lock_guard<std::mutex> lock(prefetch_mutex_);
      prefetched_.reset();
      prefetch_key_ = key;
    }
    auto ahead = [this, &pipe, honest = o, p, key] {
      try {
        GenerateResult clip = pipe.generate_without_interceptor(honest, p);
        std::lock_guard<std::mutex> lock(prefetch_mutex_);
        if (prefetch_key_ == key) prefetched_ = std::make_shared<GenerateResult>(std::move(clip));
      } catch (...) {
      }
    };
    if (rt.standing_thread)
      post_to_standing_thread(ahead);
    else
      prefetch_thread_ = std::thread(ahead);
  }
}

}  // namespace autooptim::redteam
