#include "gates/checks/clip_work.h"

#include <algorithm>

#include "base/strings.h"
#include "runtime/techniques/registry.h"
#include "runtime/techniques/sparse/video_sparse_attention_options.h"

namespace autooptim::gates {

using base::format_fixed;

namespace {

// A counter that cannot exceed so many per forward run.
struct Bound {
  const char* key;
  double per_forward;
};

// A cache policy's declared dense work (the registry's own declarations).
struct CacheFloor {
  std::string name;
  int64_t warmup;
  bool dense_last;
};

// What every clip of the candidate is held against.
struct WorkContext {
  runtime::RuntimeOptions opts;
  int64_t branches = 1, cand_N = 0, L = 0, steps = 0;
  double text_expected = 0, linear_floor_s = 0, base_denoise_s = 0, tol = 0, min_forward_share = 0;
  bool on_cuda = false;
  bool block_cost_fixed = false;  // every technique on is of the cache family: none makes a block cheaper
  std::vector<Bound> bounds;
  std::vector<CacheFloor> caches;
};

// How far a cache's speedup may exceed what the blocks it counts allow (at least; twice the noise margin if more).
constexpr double kCostSlack = 0.5;

std::string n0(double v) { return format_fixed(v, 0); }

double sum(const std::vector<int64_t>& v) {
  double s = 0;
  for (int64_t x : v) s += static_cast<double>(x);
  return s;
}

WorkContext context_of(const GateEvidence& ev, const Manifest& cand, double tol, const GateSettings& S) {
  WorkContext x;
  x.opts = to_runtime_options(cand);
  x.branches = cand.config.guidance > 1.0 ? 2 : 1;
  x.cand_N = cand.config.steps * x.branches;
  x.L = ev.work.num_layers;
  x.text_expected = static_cast<double>(x.branches * ev.work.max_text_length);
  x.linear_floor_s = ev.work.candidate_linear / (ev.calibration.matmul_tflops * 1e12);
  x.base_denoise_s = ev.timing.baseline_denoise_s;
  x.tol = tol;
  x.min_forward_share = S.min_forward_share;
  x.on_cuda = ev.on_cuda;
  const double layers = static_cast<double>(ev.work.num_layers), tokens = static_cast<double>(ev.calibration.tokens);
  x.bounds = {{"kernel.fused_qkv.launches", 2 * layers},
              {"kernel.cross_kv_cache.hits", 2 * layers},
              {"kernel.cuda_graph.replays", layers + 1},
              {"kernel.timestep_dedup.rows_saved", tokens},
              {"kernel.rope_cache.hits", 1},
              {"sparse.attention.calls", 2 * layers}};
  bool any_on = false;
  x.block_cost_fixed = true;
  for (const auto& t : runtime::techniques::all())
    if (t.on(x.opts)) {
      any_on = true;
      x.block_cost_fixed = x.block_cost_fixed && t.family == "cache";
    }
  x.block_cost_fixed = x.block_cost_fixed && any_on;
  runtime::RuntimeOptions declared = x.opts;  // the accessor hands out a reference to its field
  for (const auto& t : runtime::techniques::all())
    if (t.warmup_steps && t.on(x.opts))
      x.caches.push_back({t.name, t.warmup_steps(declared), t.dense_last_step && t.dense_last_step(x.opts)});
  return x;
}

// Claimed skips, sparse calls, text rows, graph replays and per-forward bounds against the work that ran.
void count_problems(const GateClip& c, const WorkContext& x, std::vector<std::string>& problems) {
  const auto& r = c.run;
  const auto& t = r.trace;
  const double claimed = t.get("transformer.forwards");
  const double looped = sum(r.times.step_forwards);
  const double blocks = sum(r.times.step_blocks), sparse_run = sum(r.times.step_sparse_attention);
  if (claimed != looped)
    problems.push_back(c.name + ": the trace claims " + n0(claimed) + " transformer forwards, the denoising loop ran " +
                       n0(looped));
  // Claimed skips must be backed by missing work: a skipped forward is one the loop did not run, or
  // one whose block stack ran at least one block fewer (counted where the blocks run).
  const double claimed_skips = std::max(t.get("cache.skipped_forwards"), t.get("cache.easycache.skipped_forwards"));
  const double missing = std::max(0.0, static_cast<double>(x.cand_N) - looped) + std::max(0.0, looped * x.L - blocks);
  if (claimed_skips > missing + 1e-9)
    problems.push_back(c.name + ": the cache claims " + n0(claimed_skips) + " skipped forwards, but only " +
                       n0(missing) + " forwards' or blocks' work is missing from what the loop ran (" + n0(looped) +
                       " forwards, " + n0(blocks) + " blocks)");
  // Sparse attention calls claimed against those the model code took the sparse path for (a pattern
  // whose window covers every token counts its call as dense: fewer, never more).
  if (t.get("sparse.attention.calls") > sparse_run)
    problems.push_back(c.name + ": the trace claims " + n0(t.get("sparse.attention.calls")) +
                       " sparse attention calls, the model took the sparse path " + n0(sparse_run) + " times");
  // The text encoder's work, counted where it runs: every prompt's max_text_length token rows, fewer by
  // exactly what text_trim says it saved. Embeddings made outside the timed run leave rows missing (with
  // text_trim on, the timing check of the text encoding is off: this is what holds it then).
  const double text_run = static_cast<double>(r.times.text_tokens), text_saved = t.get("kernel.text_trim.tokens_saved");
  if (text_run + text_saved != x.text_expected)
    problems.push_back(c.name + ": the text encoder ran " + n0(text_run) + " token rows and text_trim claims " +
                       n0(text_saved) + " saved, where the prompts have " + n0(x.text_expected) +
                       ": text encoding outside the timed run?");
  if (!x.on_cuda && (t.get("kernel.cuda_graph.replays") > 0 || t.get("kernel.cuda_graph.captures") > 0))
    problems.push_back(c.name + ": claims " + n0(t.get("kernel.cuda_graph.replays")) +
                       " CUDA-graph replays on a CPU device, where no graph can be captured");
  for (const auto& b : x.bounds)
    if (t.get(b.key) > b.per_forward * std::max(claimed, looped) + 1e-9)
      problems.push_back(c.name + ": " + b.key + " = " + n0(t.get(b.key)) + " is more than " + n0(b.per_forward) +
                         " per forward run allows (" + n0(std::max(claimed, looped)) + " forwards)");
}

// Claimed skips must show in the time, and the forwards that ran cannot beat the machine's throughput.
void time_problems(const GateClip& c, const WorkContext& x, std::vector<std::string>& problems) {
  const auto& r = c.run;
  const double claimed = r.trace.get("transformer.forwards");
  const double looped = sum(r.times.step_forwards);
  // A skipped forward may cost up to 40% of a computed one (the cache's bookkeeping and the loop's own
  // work), no more.
  if (claimed < x.cand_N && claimed > 0 && x.base_denoise_s > 0) {
    const double share = claimed / static_cast<double>(x.cand_N);
    const double expect = x.base_denoise_s * (share + 0.4 * (1.0 - share));
    if (r.times.denoising > expect * (1.0 + 0.5 * x.tol) + 0.05 * x.base_denoise_s)
      problems.push_back(c.name + ": claims " + n0(claimed) + " of " + std::to_string(x.cand_N) +
                         " forwards, but its denoising took " + format_fixed(r.times.denoising, 3) + " s, as long as " +
                         n0(x.cand_N * r.times.denoising / x.base_denoise_s) +
                         " of the baseline's forwards (measured time contradicts the counters)");
  }
  // The physical floor of the forwards it ran: their GEMMs at twice the calibrated matmul rate.
  if (looped > 0 && r.times.denoising < looped * x.linear_floor_s / 2.0)
    problems.push_back(c.name + ": " + n0(looped) + " forwards in " + format_fixed(r.times.denoising, 3) +
                       " s is faster than the machine's calibrated throughput allows");
}

// Techniques of the cache family skip work and make none of it cheaper: at the share of the baseline's blocks its
// counts say ran, such a candidate can at most save that share of the baseline's denoising time, so its speedup is
// bounded by the baseline's time over (its time outside the loop + its denoising x share). The counts are made in
// the candidate's process, where a plugin can forge them (every block "run", so the work floors pass on paper);
// the speedup is the gate's own, from adjacent timed pairs. It may exceed the bound by twice the gate's noise margin
// and never less than a half: an honest cache that skips whole forwards saves their non-block work as well (the
// patch embedding, the head), which the block count does not see, and one timed pair can be a lucky one (step_reuse:
// 0.77 and 0.95 of its bound of 1.75x in two gates, 1.89x in an earlier one; a cache that skips nearly every step is
// bounded by the time outside the loop alone, where the baseline's noise weighs most). A forger that claims every
// block still cannot pass as more than 1.5x; claim_work, 2.1x, is caught.
void cost_problems(const GateEvidence& ev, const WorkContext& x, nlohmann::json& cost,
                   std::vector<std::string>& problems) {
  const double base_s = ev.timing.baseline.median, speedup = ev.timing.speedup;
  if (!x.block_cost_fixed || !(x.base_denoise_s > 0) || !(base_s > x.base_denoise_s) || !(speedup > 0) ||
      x.cand_N * x.L <= 0)
    return;
  double share = 1.0;
  bool timed = false;
  for (const auto& c : ev.clips)
    if (c.pair) {
      share = std::min(share, sum(c.run.times.step_blocks) / static_cast<double>(x.cand_N * x.L));
      timed = true;
    }
  if (!timed) return;
  const double outside_s = base_s - x.base_denoise_s, bound = base_s / (outside_s + x.base_denoise_s * share);
  const double allowed = bound * (1.0 + std::max(kCostSlack, 2.0 * ev.timing.margin));
  cost = {{"block_share", share},
          {"outside_loop_s", outside_s},
          {"bound", bound},
          {"allowed", allowed},
          {"speedup", speedup}};
  if (speedup > allowed)
    problems.push_back("its timed pairs ran " + format_fixed(speedup, 2) + "x faster than the baseline, where a " +
                       "cache (which makes no block cheaper) that runs the " + format_fixed(100 * share, 1) +
                       "% of the baseline's blocks its counts claim reaches at most " + format_fixed(bound, 2) +
                       "x (the baseline's " + format_fixed(outside_s, 3) + " s outside the denoising loop, " +
                       format_fixed(x.base_denoise_s, 3) + " s in it), " + format_fixed(allowed, 2) +
                       "x with the slack for noise: the counts claim work that was not done");
}

// Work floors, from the loop's and the blocks' own counts: every candidate computes the first step in
// full and a minimum share of the blocks; a cache its declared warm-up and last steps; sparse attention
// its declared dense steps and layers.
void floor_problems(const GateClip& c, const WorkContext& x, std::vector<std::string>& problems) {
  const auto& sf = c.run.times.step_forwards;
  const auto& sb = c.run.times.step_blocks;
  const auto& ss = c.run.times.step_sparse_attention;
  if (sf.empty() || sb.size() != sf.size() || ss.size() != sf.size()) {
    problems.push_back(c.name + ": no denoising loop ran (the clip came from elsewhere)");
    return;
  }
  const double looped = sum(sf), blocks = sum(sb);
  const int64_t full_step = x.branches * x.L;
  if (sf.front() < x.branches || sb.front() < full_step)
    problems.push_back(c.name + ": the first step ran " + std::to_string(sf.front()) + " of " +
                       std::to_string(x.branches) + " forwards and " + std::to_string(sb.front()) + " of " +
                       std::to_string(full_step) + " blocks");
  const double share = std::min(looped / static_cast<double>(x.cand_N), blocks / static_cast<double>(x.cand_N * x.L));
  if (share < x.min_forward_share)
    problems.push_back(c.name + ": ran " + n0(looped) + " of " + std::to_string(x.cand_N) + " forwards and " +
                       n0(blocks) + " of " + std::to_string(x.cand_N * x.L) + " blocks (" +
                       format_fixed(100 * share, 1) + "%), below the work floor of " +
                       format_fixed(100 * x.min_forward_share, 1) + "%");
  const auto n_steps = static_cast<int64_t>(sf.size());
  auto at = [](const std::vector<int64_t>& v, int64_t s) { return v[static_cast<size_t>(s)]; };
  auto full = [&](int64_t s) { return at(sf, s) >= x.branches && at(sb, s) >= full_step; };
  auto ran_text = [&](int64_t s) {
    return std::to_string(at(sf, s)) + " of " + std::to_string(x.branches) + " forwards and " +
           std::to_string(at(sb, s)) + " of " + std::to_string(full_step) + " blocks";
  };
  for (const auto& cf : x.caches) {
    for (int64_t s = 0; s < std::min(cf.warmup, n_steps); ++s)
      if (!full(s)) {
        problems.push_back(c.name + ": " + cf.name + " declares " + std::to_string(cf.warmup) +
                           " warm-up steps computed in full, but step " + std::to_string(s) + " ran " + ran_text(s));
        break;
      }
    if (cf.dense_last && !full(n_steps - 1))
      problems.push_back(c.name + ": " + cf.name + " declares a dense last step, which ran " + ran_text(n_steps - 1));
  }
  const auto& sparse = x.opts.of<runtime::SparseAttentionOptions>();
  if (sparse.pattern == "none") return;
  const int64_t sparse_layers = std::max<int64_t>(0, x.L - sparse.dense_layers);
  for (int64_t s = 0; s < n_steps; ++s) {
    const int64_t sp = at(ss, s);
    const int64_t allowed = s < sparse.dense_steps ? 0 : at(sf, s) * sparse_layers;
    if (sp > allowed) {
      problems.push_back(c.name + ": sparse attention declares dense_steps " + std::to_string(sparse.dense_steps) +
                         " and dense_layers " + std::to_string(sparse.dense_layers) + ", but step " +
                         std::to_string(s) + " ran " + std::to_string(sp) +
                         " self-attention calls sparse where at most " + std::to_string(allowed) +
                         " may be (the declared dense work was skipped)");
      break;
    }
  }
}

}  // namespace

ClipWorkAudit audit_clip_work(const GateEvidence& ev, const Manifest& cand, double tol, const GateSettings& S) {
  const WorkContext x = context_of(ev, cand, tol, S);
  ClipWorkAudit audit;
  for (const auto& c : ev.clips) {
    const auto& r = c.run;
    audit.work.push_back({{"clip", c.name},
                          {"forwards_claimed", r.trace.get("transformer.forwards")},
                          {"forwards_looped", sum(r.times.step_forwards)},
                          {"blocks_run", sum(r.times.step_blocks)},
                          {"text_tokens_run", r.times.text_tokens},
                          {"sparse_attention_run", sum(r.times.step_sparse_attention)},
                          {"denoise_s", r.times.denoising},
                          {"step_forwards", r.times.step_forwards},
                          {"step_blocks", r.times.step_blocks}});
    count_problems(c, x, audit.counter_problems);
    time_problems(c, x, audit.counter_problems);
    floor_problems(c, x, audit.floor_problems);
  }
  cost_problems(ev, x, audit.cost, audit.counter_problems);
  return audit;
}

}  // namespace autooptim::gates
