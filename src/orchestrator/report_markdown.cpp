// report.md: the report for CI summaries and reviews, one section per function in the page's order.
#include "orchestrator/report.h"

#include <ostream>
#include <sstream>
#include <string>

#include "orchestrator/report_agents.h"
#include "orchestrator/report_text.h"

using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

using report_text::arr;
using report_text::by_category;
using report_text::could_not_run;
using report_text::deploy_text;
using report_text::explored_summary;
using report_text::gate_prompts_text;
using report_text::gated;
using report_text::get;
using report_text::heldout_text;
using report_text::md;
using report_text::num;
using report_text::obj;
using report_text::per_prompt_text;
using report_text::prompts_text;
using report_text::quality_of;
using report_text::rollback_text;
using report_text::speedup_text;
using report_text::str;
using report_text::tier_quality_text;
using report_text::tier_rows;
using report_text::unreached_rows;
using report_text::verdict_reason;
using report_text::verdict_word;

// The title, an interruption, and the outcome with its problems and warnings.
void markdown_outcome(std::ostream& o, const json& r) {
  o << "# autooptim report: " << r.value("model", "?") << "\n\n";
  const json& outcome = obj(r, "outcome");
  const int code = outcome.value("exit_code", 0);
  if (r.contains("interrupted"))
    o << "**Interrupted** (" << str(obj(r, "interrupted"), "name")
      << "): this report covers what was done; `--resume` continues.\n\n";
  o << "**Outcome: " << (code == 0 ? "OK" : "FAILED") << "** (exit " << code << ")";
  for (const auto& p : arr(outcome, "problems")) o << "\n- problem: " << p.get<std::string>();
  for (const auto& w : arr(outcome, "warnings")) o << "\n- warning: " << w.get<std::string>();
  o << "\n\n";
}

// The baseline's time and what it is; a reduced configuration said.
void markdown_baseline(std::ostream& o, const json& r) {
  const json& b = obj(r, "baseline");
  o << "Baseline `" << str(b, "manifest") << "`: "
    << (get(b, "seconds") > 0 ? num(get(b, "seconds"), 3) + " s per clip" : "not measured (" + str(b, "reason") + ")")
    << " on " << r.value("device_name", "?") << " (" << r.value("device", "?") << "), weights "
    << r.value("weights", "?") << ".\n";
  o << "This time is the median of the baseline's own gate run (`" << str(b, "gate_run")
    << "`: " << timing_text(obj(b, "timing"))
    << "). Each candidate's speedup is against the baseline runs interleaved with it in its own gate run (column "
       "\"baseline s\").\n\n";
  if (!r.value("official_config", true))
    o << "**Reduced configuration** (" << r["config"].dump()
      << "): measured, but off the official setting, so no tier can be won.\n\n";
}

// The tiers, the buckets none reached, and what the deploy path checks.
void markdown_tiers(std::ostream& o, const json& r) {
  o << "## Tiers\n\n| buckets | manifest | speedup | worst PSNR | held-out | deploy path | rollback "
       "|\n|---|---|---|---|---|---|---|\n";
  for (const auto& row : tier_rows(r)) {
    const json& t = row.tier;
    o << "| " << row.buckets << " | `" << t.value("manifest", "") << "` | " << num(get(t, "speedup")) << "x"
      << prompts_text(t, "prompts", "split_prompts", r.value("split", "")) << " | " << md(tier_quality_text(t)) << " | "
      << md(heldout_text(t, r)) << " | " << md(deploy_text(t)) << " | " << md(rollback_text(t)) << " |\n";
  }
  for (const auto& [buckets, notes] : unreached_rows(r))
    o << "\n**" << buckets << ": none reached.** " << md(notes) << "\n";
  o << "\nDeploy path: the tier's manifest generated again with `autooptim generate --manifest tiers/<bucket>.json`, "
       "in its own "
       "processes, against the baseline through the same path; a tier whose clip is not the gate's bit for bit, or "
       "whose speed "
       "through that path misses the bucket beyond the noise, is not delivered (docs/deploy.md).\n\n";
}

void markdown_candidates(std::ostream& o, const json& r) {
  o << "## Candidates\n\n"
    << gate_prompts_text(r)
    << "\n\n| manifest | family | verdict | speedup | baseline s | candidate s | worst PSNR | SSIM | reason "
       "|\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& c : arr(r, "candidates")) {
    o << "| `" << c.value("id", "") << "` | " << c.value("family", "") << " | " << verdict_word(c) << " | "
      << speedup_text(c) << " | " << md(timing_text(obj(c, "baseline_timing"))) << " | "
      << md(timing_text(obj(c, "candidate_timing"))) << " | " << quality_of(c) << " | "
      << (gated(c) && !could_not_run(c) ? num(get(c, "ssim"), 4) : "-") << " | " << md(verdict_reason(c)) << " |\n";
  }
}

// Quality per prompt category: where a lossy candidate loses its quality.
void markdown_quality_by_category(std::ostream& o, const json& r) {
  const json& cats = obj(r, "prompt_categories");
  bool any_q = false;
  for (const auto& c : arr(r, "candidates")) any_q = any_q || !obj(c, "quality_by_prompt").empty();
  if (any_q) {
    o << "\n## Quality by prompt category (mean PSNR of each category's clips, " << r.value("split", "?") << ")\n\n";
    for (const auto& c : arr(r, "candidates")) {
      const json& q = obj(c, "quality_by_prompt");
      if (q.empty()) continue;
      o << "- `" << c.value("id", "") << "`:";
      for (const auto& [cat, v] : by_category(q, cats))
        o << " " << cat << " " << quality_text(v.first / v.second, true) << ";";
      o << " per prompt:" << per_prompt_text(q) << "\n";
    }
  }
}

void markdown_heldout(std::ostream& o, const json& r) {
  o << "\n## Held-out check (" << r.value("heldout_split", "?") << ")\n\n";
  bool any_h = false;
  for (const auto& c : arr(r, "candidates")) {
    if (!c.contains("heldout")) continue;
    any_h = true;
    const json& h = c["heldout"];
    if (!h.value("gated", true)) {
      o << "- `" << c.value("id", "") << "`: not run: " << str(h, "reason") << "\n";
      continue;
    }
    o << "- `" << c.value("id", "") << "`: " << (h.value("accepted", false) ? "ACCEPTED" : "REJECTED") << ", "
      << num(get(h, "speedup")) << "x, worst PSNR " << quality_text(get(h, "psnr"), true) << ", SSIM "
      << num(get(h, "ssim"), 4)
      << (str(h, "failure_signature").empty() ? "" : " (" + str(h, "failure_signature") + ")");
    const json& hq = obj(h, "quality_by_prompt");  // where a held-out failure comes from
    if (!hq.empty()) o << "; per prompt:" << per_prompt_text(hq);
    o << "\n";
  }
  if (!any_h) o << "No candidate reached the held-out check.\n";
}

// Clips: the baseline's next to each accepted candidate's, per prompt (paths relative to the report).
void markdown_clips(std::ostream& o, const json& r) {
  const json& b = obj(r, "baseline");
  const json& base_clips = obj(b, "clips");
  bool clips_header = false;
  for (const auto& c : arr(r, "candidates")) {
    if (!c.value("accepted", false) || obj(c, "clips").empty()) continue;
    if (!clips_header)
      o << "\n## Clips: baseline next to each accepted candidate\n\n| manifest | prompt | baseline | candidate | PSNR "
           "|\n|---|---|---|---|---|\n";
    clips_header = true;
    const json& q = obj(c, "quality_by_prompt");
    for (const auto& [id, path] : obj(c, "clips").items()) {
      const std::string bp = str(base_clips, id.c_str()), cp = path.is_string() ? path.get<std::string>() : "";
      o << "| `" << c.value("id", "") << "` | " << id << " | " << (bp.empty() ? "-" : "[" + bp + "](" + bp + ")")
        << " | " << (cp.empty() ? "-" : "[" + cp + "](" + cp + ")") << " | "
        << (q.contains(id) ? quality_text(get(q[id], "psnr"), true) : "-") << " |\n";
    }
  }
}

// The workers' generating share, memory and device-seconds (runs that recorded them).
void markdown_generating(std::ostream& o, const json& r) {
  const json& ds = obj(r, "device_seconds");
  o << "\nGenerating (inside the pipeline's generations, forwards and decodes): " << num(get(ds, "generating_s"), 0)
    << " of " << num(get(ds, "total_s"), 0) << " device-seconds held by the workers ("
    << num(100 * get(ds, "generating_share"), 0) << "%); screening " << num(get(ds, "screening_s"), 0) << " s, gating "
    << num(get(ds, "gating_s"), 0) << " s, wall " << num(get(ds, "wall_s"), 0) << " s.\n";
  const json& mem = obj(r, "memory");
  o << "\nMemory: " << mem.value("models_loaded", 0) << " model load(s), one per worker; peak worker RSS "
    << num(get(mem, "peak_worker_rss_kb") / 1e6, 2) << " GB, peak device memory "
    << num(get(mem, "peak_device_bytes") / 1e9, 2) << " GB (one worker's); executors (no model) "
    << num(get(mem, "executors_peak_rss_kb") / 1e6, 2) << " GB.\n\n";
  for (const auto& w : arr(r, "workers"))
    o << "- worker `" << str(w, "id") << "` on " << str(w, "device_name") << " (" << w.value("threads", 0) << " threads"
      << (str(w, "blas").empty() ? "" : ", " + str(w, "blas")) << "): load " << num(get(w, "load_s"), 1) << " s, held "
      << num(get(w, "held_s"), 0) << " s, busy " << num(get(w, "busy_s"), 0) << " s, " << w.value("requests", 0)
      << " requests\n";
  o << "\nDevice-seconds per candidate (screen + gate):\n\n";
  for (const auto& c : arr(r, "candidates")) {
    const json& d = obj(c, "device_seconds");
    o << "- `" << c.value("id", "") << "`: " << num(get(d, "total_s"), 1) << " s (screen " << num(get(d, "screen_s"), 1)
      << ", gate " << num(get(d, "gate_s"), 1) << ")" << (c.value("screened_out", false) ? ", screened out" : "")
      << "\n";
  }
}

void markdown_device_time(std::ostream& o, const json& r) {
  const json& ds = obj(r, "device_seconds");
  o << "\n## Device time\n\n"
    << ds.value("kind", "device") << "-seconds: " << num(get(ds, "total_s"), 0) << " (" << get(ds, "devices", 1)
    << " device for " << num(get(ds, "total_s"), 0) << " s of wall time: gating " << num(get(ds, "gating_s"), 0)
    << " s, exploration " << num(get(ds, "exploration_s"), 0) << " s); " << r.value("gate_runs", 0) << " gate runs.\n";
  if (ds.contains("generating_share")) markdown_generating(o, r);
}

// Where the workers ran when a cluster ran them: the jobs, each task's end, every death and replacement.
void markdown_slurm(std::ostream& o, const json& r) {
  const json& la = obj(r, "launcher");
  if (str(la, "kind") == "slurm") {
    std::string jobs;
    for (const auto& j : arr(la, "jobs"))
      jobs += (jobs.empty() ? "" : ", ") + (j.is_string() ? j.get<std::string>() : j.dump());
    o << "\n## Slurm\n\nWorkers ran as Slurm job array(s) " << jobs << " (`" << str(la, "script") << "`, "
      << la.value("replacements", 0) << " replacement(s)):\n\n";
    for (const auto& t : arr(la, "tasks"))
      o << "- `" << str(t, "worker") << "`: " << str(t, "state")
        << (str(t, "node").empty() ? "" : " on " + str(t, "node")) << " (log `" << str(t, "log") << "`)\n";
    for (const auto& e : arr(la, "events"))
      o << "- " << str(e, "time") << " " << str(e, "worker") << ": " << str(e, "event") << "\n";
  }
}

void markdown_environment(std::ostream& o, const json& r) {
  const json& env = obj(r, "environment");
  const json& bi = obj(env, "build");
  o << "\n## Environment\n\n- started " << str(env, "timestamp") << ", finished " << str(env, "finished")
    << "\n- command: `" << str(env, "command_line") << "`\n- thresholds: " << obj(env, "thresholds").dump()
    << "\n- autooptim " << str(bi, "version") << " (" << str(bi, "flavour") << " build), commit " << str(bi, "commit")
    << ", binary sha256 " << r.value("build", "?").substr(0, 16) << "\n- libtorch " << str(bi, "libtorch") << ", CUDA "
    << str(bi, "cuda") << ", cuDNN " << str(bi, "cudnn") << ", driver " << str(bi, "driver")
    << "\n- report schema version " << r.value("schema_version", 1) << "\n";
}

}  // namespace

std::string render_markdown(const json& r) {
  std::ostringstream o;
  markdown_outcome(o, r);
  markdown_baseline(o, r);
  markdown_tiers(o, r);
  markdown_candidates(o, r);
  markdown_quality_by_category(o, r);
  markdown_heldout(o, r);
  markdown_clips(o, r);
  o << "\n## What each executor explored\n\n";
  for (const auto& e : arr(r, "executors")) o << "- " << explored_summary(e) << " (log: `" << str(e, "log") << "`)\n";
  markdown_agents(o, r);
  markdown_device_time(o, r);
  markdown_slurm(o, r);
  markdown_environment(o, r);
  return o.str();
}

}  // namespace autooptim::orchestrator
