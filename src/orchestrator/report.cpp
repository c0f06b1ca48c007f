#include "orchestrator/report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "base/atomic_file.h"
#include "gates/metrics.h"
#include "base/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

// Markdown table cells: a | would split the cell.
std::string md(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|')
      o += "\\|";
    else if (c == '\n')
      o += ' ';
    else
      o += c;
  }
  return o;
}

std::string num(double v, int prec = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

double get(const json& j, const char* k, double d = 0) {
  return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>() : d;
}
std::string str(const json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}
const json& obj(const json& j, const char* k) {
  static const json empty = json::object();
  return j.is_object() && j.contains(k) && j[k].is_object() ? j[k] : empty;
}
const json& arr(const json& j, const char* k) {
  static const json empty = json::array();
  return j.is_object() && j.contains(k) && j[k].is_array() ? j[k] : empty;
}

void write_file(const fs::path& p, const std::string& s) { gates::write_file_atomic(p.string(), s); }

const char* kBuckets[] = {"1.5x", "2x", "3x", "4x"};
static_assert(kIdenticalPsnr == gates::kPsnrCap, "identical output is the metrics' PSNR cap");

std::string join(const json& a, const std::string& sep) {
  std::string o;
  for (const auto& x : a)
    if (x.is_string()) o += (o.empty() ? "" : sep) + x.get<std::string>();
  return o;
}

bool gated(const json& c) { return c.value("gated", true); }
bool could_not_run(const json& c) { return c.value("failure_signature", "") == "could-not-run"; }

// The first failed gate and its reason ("" when every gate passed).
std::pair<std::string, std::string> first_failure(const json& c) {
  for (const auto& [g, v] : obj(c, "verdicts").items())
    if (!v.value("pass", true)) return {g, v.value("reason", "")};
  return {"", ""};
}

// One word a reader can act on, never a colour alone.
std::string verdict_word(const json& c) {
  if (!gated(c)) return "NEVER GATED";
  if (could_not_run(c)) return "COULD NOT RUN";
  return c.value("accepted", false) ? "ACCEPTED" : "REJECTED";
}

std::string verdict_reason(const json& c) {
  if (!gated(c)) return c.value("not_gated_reason", std::string("not gated"));
  const auto [g, why] = first_failure(c);
  if (g.empty()) return "passed every gate";
  return g + ": " + why;
}

std::string speedup_text(const json& c) { return gated(c) && !could_not_run(c) ? num(get(c, "speedup")) + "x" : "-"; }

}  // namespace

std::string quality_text(double psnr, bool measured) {
  if (!measured) return "-";
  if (psnr >= kIdenticalPsnr) return "identical";
  return num(psnr) + " dB";
}

std::string timing_text(const json& t) {
  if (!t.is_object() || !(get(t, "median_s") > 0)) return "-";
  const auto n = t.contains("runs_s") && t["runs_s"].is_array() ? t["runs_s"].size() : 0;
  return num(get(t, "median_s"), 3) + " s (" + num(get(t, "min_s"), 3) + "-" + num(get(t, "max_s"), 3) + ", spread " +
         num(100 * get(t, "spread"), 1) + "%, " + std::to_string(n) + " runs)";
}

namespace {

std::string quality_of(const json& c) { return quality_text(get(c, "psnr"), gated(c) && !could_not_run(c)); }

// Mean PSNR per prompt category of one gate run's quality_by_prompt.
std::map<std::string, std::pair<double, int>> by_category(const json& q, const json& categories) {
  std::map<std::string, std::pair<double, int>> m;
  for (const auto& [id, x] : q.items()) {
    const std::string cat =
        categories.contains(id) && categories[id].is_string() ? categories[id].get<std::string>() : "?";
    m[cat].first += std::min(get(x, "psnr"), kIdenticalPsnr);
    m[cat].second += 1;
  }
  return m;
}

// " id quality id quality ..." of a gate run's quality_by_prompt (worst PSNR of each prompt's clip).
std::string per_prompt_text(const json& q) {
  std::string s;
  for (const auto& [id, x] : q.items()) s += " " + id + " " + quality_text(get(x, "psnr"), true);
  return s;
}

std::string explored_summary(const json& e) {
  const json& ex = obj(e, "explored");
  const json& trials = arr(ex, "trials");
  std::string s = e.value("family", "?") + ": " + e.value("state", "?");
  if (!str(e, "reason").empty()) s += " (" + str(e, "reason") + ")";
  if (trials.empty()) return s + "; no trial measured";
  double smin = 1e9, smax = 0, pmin = 1e9, pmax = 0;
  for (const auto& t : trials) {
    smin = std::min(smin, get(t, "speedup")), smax = std::max(smax, get(t, "speedup"));
    pmin = std::min(pmin, get(t, "psnr")), pmax = std::max(pmax, get(t, "psnr"));
  }
  s += "; " + std::to_string(trials.size()) + (trials.size() == 1 ? " trial reached " : " trials reached ") +
       num(smin) + (smin == smax ? "" : "-" + num(smax)) + "x at " + quality_text(pmin, true) +
       (pmin == pmax ? "" : " to " + quality_text(pmax, true)) + "; proposed " +
       (arr(ex, "proposed").empty() ? std::string("nothing") : join(arr(ex, "proposed"), ", "));
  return s;
}

// A tier's row: the buckets one manifest won share it ("1.5x, 2x").
struct TierRow {
  std::string buckets;
  json tier;
};

std::vector<TierRow> tier_rows(const json& r) {
  std::vector<TierRow> rows;
  for (const char* k : kBuckets) {
    const json& t = r["tiers"].value(k, json());
    if (t.is_null()) continue;
    if (!rows.empty() && rows.back().tier.value("manifest", "") == t.value("manifest", ""))
      rows.back().buckets += std::string(", ") + k;
    else
      rows.push_back({k, t});
  }
  return rows;
}

// The buckets no tier reached, grouped where their notes are the same ("2x, 3x, 4x"): one line each.
std::vector<std::pair<std::string, std::string>> unreached_rows(const json& r) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const char* k : kBuckets) {
    if (!r["tiers"].value(k, json()).is_null()) continue;
    const std::string notes = join(arr(obj(r, "tier_notes"), k), "; ");
    if (!rows.empty() && rows.back().second == notes)
      rows.back().first += std::string(", ") + k;
    else
      rows.push_back({k, notes});
  }
  return rows;
}

// How many prompts each gate run judged: the figure every speedup and PSNR of the candidates rests on.
std::string gate_prompts_text(const json& r) {
  const json& th = obj(obj(r, "environment"), "thresholds");
  const int64_t max = th.value("max_prompts", int64_t{0});
  const std::string split = r.value("split", "");
  const int64_t all = r.value("split_prompts", int64_t{0});
  const std::string of = all > 0 ? std::to_string(max > 0 ? std::min(max, all) : all) + " of " + std::to_string(all)
                                 : (max > 0 ? "the first " + std::to_string(max) : "all");
  return "Each gate run judged " + of + " " + split + " prompts (--max-prompts), " +
         std::to_string(th.value("timing_repeats", 0)) +
         " timed pairs each; a tier's winner is then confirmed on its held-out split.";
}

// "on 2 of 8 val prompts" (empty for a report made before the counts were recorded).
std::string prompts_text(const json& t, const char* used, const char* of, const std::string& split) {
  if (!t.contains(used)) return "";
  return " on " + std::to_string(t.value(used, 0)) + " of " + std::to_string(t.value(of, 0)) + " " + split + " prompts";
}

// The worst PSNR and how far above the floor it is; a margin under 1 dB is flagged.
std::string tier_quality_text(const json& t) {
  const double psnr = get(t, "psnr");
  std::string s = quality_text(psnr, true);
  if (!t.contains("psnr_floor") || psnr >= kIdenticalPsnr) return s;
  const double margin = psnr - get(t, "psnr_floor");
  s += " (floor " + num(get(t, "psnr_floor")) + " dB, margin " + num(margin) + " dB";
  return s + (margin < 1.0 ? ": THIN MARGIN)" : ")");
}

std::string heldout_text(const json& t, const json& r) {
  if (!t.value("heldout_accepted", false)) return "-";
  return "accepted, " + num(get(t, "heldout_speedup")) + "x, " + quality_text(get(t, "heldout_psnr"), true) +
         prompts_text(t, "heldout_prompts", "heldout_split_prompts", r.value("heldout_split", ""));
}

// Rollback: the switches the tier turns on (each tier passed the off-identity gate with them off).
std::string rollback_text(const json& t) {
  if (!t.contains("switches")) return "-";
  const std::string s = join(t["switches"], ", ");
  return s.empty() ? "nothing to turn off" : "turn off " + s;
}

std::string deploy_text(const json& t) {
  if (!t.contains("deploy")) return "-";
  const json& d = t["deploy"];
  if (!d.value("ran", false)) return "not checked: " + d.value("not_run", std::string("?"));
  // The deploy path's own figure; the gated one beside it when they differ beyond the noise.
  return std::string(d.value("bit_exact", false) ? "reproduced " : "did not reproduce: ") + num(get(d, "speedup")) +
         "x" + (d.value("reproduced", false) ? "" : " (slower than gated)") +
         ", bit-exact: " + (d.value("bit_exact", false) ? "yes" : "no");
}
}  // namespace

std::string render_markdown(const json& r) {
  std::ostringstream o;
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
  // Quality per prompt category: where a lossy candidate loses its quality.
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
  // Clips: the baseline's next to each accepted candidate's, per prompt (paths relative to the report).
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
  o << "\n## What each executor explored\n\n";
  for (const auto& e : arr(r, "executors")) o << "- " << explored_summary(e) << " (log: `" << str(e, "log") << "`)\n";
  const json& ds = obj(r, "device_seconds");
  o << "\n## Device time\n\n"
    << ds.value("kind", "device") << "-seconds: " << num(get(ds, "total_s"), 0) << " (" << get(ds, "devices", 1)
    << " device for " << num(get(ds, "total_s"), 0) << " s of wall time: gating " << num(get(ds, "gating_s"), 0)
    << " s, exploration " << num(get(ds, "exploration_s"), 0) << " s); " << r.value("gate_runs", 0) << " gate runs.\n";
  if (ds.contains("generating_share")) {
    o << "\nGenerating (inside the pipeline's generations, forwards and decodes): " << num(get(ds, "generating_s"), 0)
      << " of " << num(get(ds, "total_s"), 0) << " device-seconds held by the workers ("
      << num(100 * get(ds, "generating_share"), 0) << "%); screening " << num(get(ds, "screening_s"), 0)
      << " s, gating " << num(get(ds, "gating_s"), 0) << " s, wall " << num(get(ds, "wall_s"), 0) << " s.\n";
    const json& mem = obj(r, "memory");
    o << "\nMemory: " << mem.value("models_loaded", 0) << " model load(s), one per worker; peak worker RSS "
      << num(get(mem, "peak_worker_rss_kb") / 1e6, 2) << " GB, peak device memory "
      << num(get(mem, "peak_device_bytes") / 1e9, 2) << " GB (one worker's); executors (no model) "
      << num(get(mem, "executors_peak_rss_kb") / 1e6, 2) << " GB.\n\n";
    for (const auto& w : arr(r, "workers"))
      o << "- worker `" << str(w, "id") << "` on " << str(w, "device_name") << " (" << w.value("threads", 0)
        << " threads" << (str(w, "blas").empty() ? "" : ", " + str(w, "blas")) << "): load " << num(get(w, "load_s"), 1)
        << " s, held " << num(get(w, "held_s"), 0) << " s, busy " << num(get(w, "busy_s"), 0) << " s, "
        << w.value("requests", 0) << " requests\n";
    o << "\nDevice-seconds per candidate (screen + gate):\n\n";
    for (const auto& c : arr(r, "candidates")) {
      const json& d = obj(c, "device_seconds");
      o << "- `" << c.value("id", "") << "`: " << num(get(d, "total_s"), 1) << " s (screen "
        << num(get(d, "screen_s"), 1) << ", gate " << num(get(d, "gate_s"), 1) << ")"
        << (c.value("screened_out", false) ? ", screened out" : "") << "\n";
    }
  }
  // Where the workers ran when a cluster ran them: the jobs, each task's end, every death and replacement.
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
  const json& env = obj(r, "environment");
  const json& bi = obj(env, "build");
  o << "\n## Environment\n\n- started " << str(env, "timestamp") << ", finished " << str(env, "finished")
    << "\n- command: `" << str(env, "command_line") << "`\n- thresholds: " << obj(env, "thresholds").dump()
    << "\n- autooptim " << str(bi, "version") << " (" << str(bi, "flavour") << " build), commit " << str(bi, "commit")
    << ", binary sha256 " << r.value("build", "?").substr(0, 16) << "\n- libtorch " << str(bi, "libtorch") << ", CUDA "
    << str(bi, "cuda") << ", cuDNN " << str(bi, "cudnn") << ", driver " << str(bi, "driver")
    << "\n- report schema version " << r.value("schema_version", 1) << "\n";
  return o.str();
}

std::string render_html(const json& r, const std::function<std::string(const std::string&)>& clip_src) {
  std::ostringstream o;
  const json& cands = arr(r, "candidates");
  const double floor_db = get(obj(obj(r, "environment"), "thresholds"), "min_psnr_db", 30.0);
  // Speed/quality plot of the gated candidates: speedup (x, log2) against worst-clip PSNR (y). Identical
  // output sits on a band at the top; never-gated candidates are listed, not plotted (no numbers).
  const double W = 760, H = 420, L = 60, B = 50, T = 34, R = 150;
  double xmax = 4.5, ymin = 10, ymax = 50;
  for (const auto& c : cands) {
    if (!gated(c) || could_not_run(c)) continue;
    xmax = std::max(xmax, get(c, "speedup") * 1.15);
    const double p = get(c, "psnr");
    if (p > 0 && p < kIdenticalPsnr)
      ymin = std::min(ymin, std::floor(p / 5) * 5), ymax = std::max(ymax, std::ceil(p / 5) * 5);
  }
  const double yid = ymax + 8;  // the "identical" band
  auto X = [&](double s) { return L + (W - L - R) * std::log2(std::max(s, 0.5) / 0.5) / std::log2(xmax / 0.5); };
  auto Y = [&](double p) {
    return H - B - (H - B - T) * (std::clamp(p >= kIdenticalPsnr ? yid : p, ymin, yid) - ymin) / (yid - ymin);
  };
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
      << "' role='img' aria-label='speed and quality of every gated candidate'>";
  svg << "<rect x='0' y='0' width='" << W << "' height='" << H << "' fill='#fff'/>";
  svg << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='#333'/>";
  svg << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='#333'/>";
  for (double s : {0.5, 1.0, 6.0, 8.0})  // 1.5, 2, 3 and 4 are the tier lines' own labels
    if (s <= xmax) {
      svg << "<line x1='" << X(s) << "' y1='" << T << "' x2='" << X(s) << "' y2='" << H - B << "' stroke='"
          << (s == 1.0 ? "#999" : "#eee") << "'/>";
      svg << "<text x='" << X(s) << "' y='" << H - B + 16 << "' font-size='11' text-anchor='middle'>" << num(s, 1)
          << "x</text>";
    }
  // Tier thresholds: dashed, labelled.
  for (const auto& [label, s] :
       std::vector<std::pair<std::string, double>>{{"1.5x", 1.5}, {"2x", 2.0}, {"3x", 3.0}, {"4x", 4.0}})
    if (s <= xmax) {
      svg << "<line x1='" << X(s) << "' y1='" << T << "' x2='" << X(s) << "' y2='" << H - B
          << "' stroke='#0969da' stroke-width='1.2' stroke-dasharray='5 3'/>";
      svg << "<text x='" << X(s) << "' y='" << T - 6 << "' font-size='11' fill='#0969da' text-anchor='middle'>tier "
          << label << "</text>";
      svg << "<text x='" << X(s) << "' y='" << H - B + 16 << "' font-size='11' text-anchor='middle'>" << label
          << "</text>";
    }
  for (double p = ymin; p <= ymax; p += 5)
    svg << "<text x='" << L - 6 << "' y='" << Y(p) + 4 << "' font-size='11' text-anchor='end'>" << num(p, 0)
        << "</text>";
  svg << "<text x='" << L - 6 << "' y='" << Y(kIdenticalPsnr) + 4
      << "' font-size='11' text-anchor='end'>identical</text>";
  // The quality floor a lossy candidate must clear.
  svg << "<line x1='" << L << "' y1='" << Y(floor_db) << "' x2='" << W - R << "' y2='" << Y(floor_db)
      << "' stroke='#bc4c00' stroke-width='1.5' stroke-dasharray='6 3'/><text x='" << W - R + 4 << "' y='"
      << Y(floor_db) + 4 << "' font-size='11' fill='#bc4c00'>quality floor " << num(floor_db, 0) << " dB</text>";
  svg << "<text x='" << (L + W - R) / 2 << "' y='" << H - 10
      << "' font-size='12' text-anchor='middle'>speedup over the baseline (log scale)</text>";
  svg << "<text x='14' y='" << (T + H - B) / 2 << "' font-size='12' text-anchor='middle' transform='rotate(-90 14 "
      << (T + H - B) / 2 << ")'>worst-clip PSNR vs baseline (dB)</text>";
  int n = 0, legend = 0;
  for (const auto& c : cands) {
    ++n;
    if (!gated(c) || could_not_run(c)) continue;
    const bool ok = c.value("accepted", false);
    const double x = X(get(c, "speedup")), y = Y(get(c, "psnr"));
    // Shape and label carry the verdict, not colour alone: a filled circle accepted, an x rejected.
    if (ok)
      svg << "<circle cx='" << x << "' cy='" << y << "' r='5' fill='#1a7f37'>";
    else
      svg << "<path d='M" << x - 5 << " " << y - 5 << "L" << x + 5 << " " << y + 5 << "M" << x - 5 << " " << y + 5
          << "L" << x + 5 << " " << y - 5 << "' stroke='#cf222e' stroke-width='2'>";
    svg << "<title>" << esc(c.value("id", "")) << ": " << num(get(c, "speedup")) << "x, " << quality_of(c) << ", "
        << verdict_word(c) << "</title>" << (ok ? "</circle>" : "</path>");
    svg << "<text x='" << x + 7 << "' y='" << y - 6 << "' font-size='10'>" << n << "</text>";
    // The legend beside the plot names each point without a hover (the model's prefix left out).
    std::string name = c.value("id", "");
    if (const auto slash = name.find('/'); slash != std::string::npos) name = name.substr(slash + 1);
    if (name.size() > 24) name = name.substr(0, 23) + "...";
    svg << "<text x='" << W - R + 4 << "' y='" << T + 40 + 13 * legend++ << "' font-size='10' fill='"
        << (ok ? "#1a7f37" : "#cf222e") << "'>" << n << " " << esc(name) << "</text>";
  }
  svg << "</svg>";

  o << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>autooptim report: "
    << esc(r.value("model", "")) << "</title>";
  o << "<style>body{font:14px/1.4 "
       "system-ui,sans-serif;margin:2em;max-width:80em;color:#1f2328}table{border-collapse:collapse;margin:1em 0}"
       "td,th{border:1px solid #d0d7de;padding:4px "
       "8px;text-align:left;vertical-align:top}th{background:#f6f8fa}.ok{color:#1a7f37}.no{color:#cf222e}"
       ".ng{color:#6e7781}code{background:#f6f8fa;padding:1px 4px}.problem{border-left:4px solid "
       "#cf222e;padding-left:8px}video{max-width:320px}</style></head><body>";
  o << "<h1>autooptim report: " << esc(r.value("model", "")) << "</h1>";
  const json& outcome = obj(r, "outcome");
  const int code = outcome.value("exit_code", 0);
  if (r.contains("interrupted"))
    o << "<p class='problem'><strong>Interrupted</strong> (" << esc(str(obj(r, "interrupted"), "name"))
      << "): this report covers what was done; <code>--resume</code> continues.</p>";
  o << "<p" << (code ? " class='problem'" : "") << "><strong>Outcome: " << (code == 0 ? "OK" : "FAILED")
    << "</strong> (exit " << code << ")</p>";
  if (!arr(outcome, "problems").empty() || !arr(outcome, "warnings").empty()) {
    o << "<ul>";
    for (const auto& p : arr(outcome, "problems")) o << "<li>problem: " << esc(p.get<std::string>()) << "</li>";
    for (const auto& w : arr(outcome, "warnings")) o << "<li>warning: " << esc(w.get<std::string>()) << "</li>";
    o << "</ul>";
  }
  const json& b = obj(r, "baseline");
  o << "<p>Baseline <code>" << esc(str(b, "manifest")) << "</code>: "
    << (get(b, "seconds") > 0 ? num(get(b, "seconds"), 3) + " s per clip"
                              : "not measured (" + esc(str(b, "reason")) + ")")
    << " on " << esc(r.value("device_name", "")) << ". Weights: " << esc(r.value("weights", ""))
    << ".<br>This time is the median of the baseline's own gate run (<code>" << esc(str(b, "gate_run"))
    << "</code>: " << esc(timing_text(obj(b, "timing")))
    << "). Each candidate's speedup is against the baseline runs interleaved with it in its own gate run (column "
       "&quot;baseline s&quot;).</p>";
  if (!r.value("official_config", true))
    o << "<p><strong>Reduced configuration</strong> " << esc(r["config"].dump())
      << ": measured, but off the official setting, so no tier can be won.</p>";
  o << "<h2>Tiers</h2><table><tr><th>buckets</th><th>manifest</th><th>speedup</th><th>worst "
       "PSNR</th><th>held-out</th><th>deploy path</th>"
       "<th>rollback</th></tr>";
  for (const auto& row : tier_rows(r)) {
    const json& t = row.tier;
    o << "<tr><td>" << row.buckets << "</td><td><code>" << esc(t.value("manifest", "")) << "</code></td><td>"
      << num(get(t, "speedup")) << "x" << esc(prompts_text(t, "prompts", "split_prompts", r.value("split", "")))
      << "</td><td>" << esc(tier_quality_text(t)) << "</td><td>" << esc(heldout_text(t, r)) << "</td><td>"
      << esc(deploy_text(t)) << "</td><td>" << esc(rollback_text(t)) << "</td></tr>";
  }
  for (const auto& [buckets, notes] : unreached_rows(r)) {
    o << "<tr><td>" << buckets << "</td><td colspan='6'>none reached";
    const json& list = arr(obj(r, "tier_notes"), buckets.substr(0, buckets.find(',')).c_str());
    if (!notes.empty()) {
      o << ":<ul>";
      for (const auto& x : list) o << "<li>" << esc(x.get<std::string>()) << "</li>";
      o << "</ul>";
    }
    o << "</td></tr>";
  }
  o << "</table><h2>Speed and quality</h2>" << svg.str();
  o << "<p>Filled circle: accepted by every gate. Cross: rejected. Numbers refer to the candidates table. Dashed blue: "
       "the tier thresholds; dashed "
       "orange: the quality floor of lossy candidates. Never-gated candidates have no measurement and are not "
       "plotted.</p>";
  o << "<h2>Candidates</h2><p>" << esc(gate_prompts_text(r))
    << "</p><table><tr><th>#</th><th>manifest</th><th>family</th><th>verdict</th><th>speedup</th><th>baseline "
       "s</th><th>candidate s</th>"
       "<th>worst PSNR</th><th>SSIM</th><th>gates</th></tr>";
  n = 0;
  for (const auto& c : cands) {
    ++n;
    const std::string word = verdict_word(c);
    const char* cls = word == "ACCEPTED" ? "ok" : word == "REJECTED" || word == "COULD NOT RUN" ? "no" : "ng";
    o << "<tr><td>" << n << "</td><td><code>" << esc(c.value("id", "")) << "</code></td><td>"
      << esc(c.value("family", "")) << "</td><td class='" << cls << "'><strong>" << word << "</strong></td><td>"
      << speedup_text(c) << "</td><td>" << esc(timing_text(obj(c, "baseline_timing"))) << "</td><td>"
      << esc(timing_text(obj(c, "candidate_timing"))) << "</td><td>" << quality_of(c) << "</td><td>"
      << (gated(c) && !could_not_run(c) ? num(get(c, "ssim"), 4) : "-") << "</td><td>";
    if (!gated(c))
      o << "never gated: " << esc(verdict_reason(c));
    else {
      // One line (the first failed gate, or all passed); every gate's reason one click away.
      o << esc(verdict_reason(c)) << "<details><summary>every gate</summary><ul>";
      for (const auto& [g, v] : obj(c, "verdicts").items())
        o << "<li><span class='" << (v.value("pass", false) ? "ok'>pass" : "no'>FAIL") << "</span> " << esc(g) << ": "
          << esc(v.value("reason", "")) << "</li>";
      o << "</ul></details>";
    }
    o << "</td></tr>";
  }
  o << "</table>";
  // Clips: per prompt, the baseline once and each tier beside it (the accepted candidates when no tier was
  // reached), then each tier's held-out clips. Sources go through clip_src (data: URIs when written to disk).
  const json& base_clips = obj(b, "clips");
  std::vector<const json*> shown;
  std::vector<std::string> shown_label;
  for (const auto& row : tier_rows(r))
    for (const auto& c : cands)
      if (c.value("id", "") == row.tier.value("manifest", ""))
        shown.push_back(&c), shown_label.push_back("tier " + row.buckets);
  if (shown.empty())
    for (const auto& c : cands)
      if (c.value("accepted", false) && !obj(c, "clips").empty() && shown.size() < 4)
        shown.push_back(&c), shown_label.push_back("accepted");
  auto video = [&](const std::string& path) {
    return path.empty()
               ? std::string("-")
               : "<video controls muted loop width='320' src='" + esc(clip_src ? clip_src(path) : path) + "'></video>";
  };
  const json& texts = obj(r, "prompt_texts");
  if (!shown.empty() && !base_clips.empty()) {
    o << "<h2>Clips on " << esc(r.value("split", "")) << ": the baseline and "
      << (shown_label[0] == "accepted" ? "the accepted candidates" : "each tier")
      << "</h2><table><tr><th>prompt</th><th>baseline</th>";
    for (size_t k = 0; k < shown.size(); ++k)
      o << "<th><code>" << esc(shown[k]->value("id", "")) << "</code><br>" << esc(shown_label[k]) << "</th>";
    o << "</tr>";
    for (const auto& [id, bp] : base_clips.items()) {
      o << "<tr><td><code>" << esc(id) << "</code><br>" << esc(str(texts, id.c_str())) << "</td><td>"
        << video(bp.is_string() ? bp.get<std::string>() : "") << "</td>";
      for (const json* c : shown) {
        const json& q = obj(*c, "quality_by_prompt");
        o << "<td>" << video(str(obj(*c, "clips"), id.c_str())) << "<br>"
          << (q.contains(id) ? quality_text(get(q[id], "psnr"), true) : "-") << "</td>";
      }
      o << "</tr>";
    }
    o << "</table>";
    for (size_t k = 0; k < shown.size(); ++k) {
      const json& h = obj(*shown[k], "heldout");
      if (obj(h, "clips").empty()) continue;
      o << "<h3>Held-out clips of <code>" << esc(shown[k]->value("id", "")) << "</code> ("
        << esc(r.value("heldout_split", ""))
        << "; prompts not shown: they never leave the "
           "harness)</h3><table><tr><th>prompt</th><th>clip</th><th>PSNR</th></tr>";
      const json& q = obj(h, "quality_by_prompt");
      for (const auto& [id, path] : obj(h, "clips").items())
        o << "<tr><td><code>" << esc(id) << "</code></td><td>" << video(path.is_string() ? path.get<std::string>() : "")
          << "</td><td>" << (q.contains(id) ? quality_text(get(q[id], "psnr"), true) : "-") << "</td></tr>";
      o << "</table>";
    }
  }
  // Quality per category and prompt.
  const json& cats = obj(r, "prompt_categories");
  bool qh = false;
  for (const auto& c : cands) {
    const json& q = obj(c, "quality_by_prompt");
    if (q.empty()) continue;
    if (!qh)
      o << "<h2>Quality by prompt category (" << esc(r.value("split", ""))
        << ")</h2><table><tr><th>manifest</th><th>category: mean PSNR</th><th>per prompt</th></tr>";
    qh = true;
    o << "<tr><td><code>" << esc(c.value("id", "")) << "</code></td><td>";
    for (const auto& [cat, v] : by_category(q, cats))
      o << esc(cat) << ": " << quality_text(v.first / v.second, true) << "<br>";
    o << "</td><td>";
    for (const auto& [id, x] : q.items())
      o << esc(id) << " " << quality_text(get(x, "psnr"), true) << " / SSIM " << num(get(x, "ssim"), 4) << "<br>";
    o << "</td></tr>";
  }
  if (qh) o << "</table>";
  o << "<h2>Held-out check (" << esc(r.value("heldout_split", "")) << ")</h2><ul>";
  bool any_h = false;
  for (const auto& c : cands) {
    if (!c.contains("heldout")) continue;
    any_h = true;
    const json& h = c["heldout"];
    o << "<li><code>" << esc(c.value("id", "")) << "</code>: ";
    if (!h.value("gated", true))
      o << "not run: " << esc(str(h, "reason"));
    else
      o << (h.value("accepted", false) ? "ACCEPTED" : "REJECTED") << ", " << num(get(h, "speedup")) << "x, worst PSNR "
        << quality_text(get(h, "psnr"), true) << ", SSIM " << num(get(h, "ssim"), 4)
        << (str(h, "failure_signature").empty() ? "" : " (" + esc(str(h, "failure_signature")) + ")");
    if (h.value("gated", true) && !obj(h, "quality_by_prompt").empty())
      o << "; per prompt:" << esc(per_prompt_text(obj(h, "quality_by_prompt")));
    o << "</li>";
  }
  if (!any_h) o << "<li>No candidate reached the held-out check.</li>";
  o << "</ul><h2>What each executor explored</h2>";
  for (const auto& e : arr(r, "executors")) {
    o << "<p>" << esc(explored_summary(e)) << " (log: <a href='" << esc(str(e, "log")) << "'>" << esc(str(e, "log"))
      << "</a>)</p>";
    const json& trials = arr(obj(e, "explored"), "trials");
    if (trials.empty()) continue;
    o << "<details><summary>" << trials.size()
      << " trials</summary><table><tr><th>trial</th><th>speedup</th><th>worst "
         "PSNR</th><th>prompts</th><th>engaged</th></tr>";
    for (const auto& t : trials)
      o << "<tr><td>" << esc(str(t, "label")) << "</td><td>" << num(get(t, "speedup")) << "x</td><td>"
        << quality_text(get(t, "psnr"), true) << "</td><td>" << t.value("prompts", 0) << "</td><td>"
        << (t.value("engaged", true) ? "yes" : "no") << "</td></tr>";
    o << "</table></details>";
  }
  const json& ds = obj(r, "device_seconds");
  o << "<h2>Device time</h2><p>" << esc(ds.value("kind", std::string("device")))
    << "-seconds: " << num(get(ds, "total_s"), 0) << " (" << get(ds, "devices", 1) << " device; gating "
    << num(get(ds, "gating_s"), 0) << " s, exploration " << num(get(ds, "exploration_s"), 0) << " s); "
    << r.value("gate_runs", 0) << " gate runs.</p>";
  const json& env = obj(r, "environment");
  const json& bi = obj(env, "build");
  o << "<h2>Environment</h2><table>";
  auto row = [&o](const std::string& k, const std::string& v) {
    o << "<tr><th>" << esc(k) << "</th><td>" << esc(v) << "</td></tr>";
  };
  row("started", str(env, "timestamp"));
  row("finished", str(env, "finished"));
  row("command line", str(env, "command_line"));
  row("thresholds", obj(env, "thresholds").dump());
  row("autooptim", str(bi, "version") + " (" + str(bi, "flavour") + " build, " + str(bi, "build_type") + "), commit " +
                       str(bi, "commit"));
  row("binary sha256", r.value("build", ""));
  row("libtorch / CUDA / cuDNN / driver",
      str(bi, "libtorch") + " / " + str(bi, "cuda") + " / " + str(bi, "cudnn") + " / " + str(bi, "driver"));
  row("device", r.value("device_name", "") + " (" + r.value("device", "") + ")");
  row("report schema version", std::to_string(r.value("schema_version", 1)));
  o << "</table></body></html>\n";
  return o.str();
}

std::string render_junit(const json& r) {
  // A testcase passes when the system did its job: a gate that rejected a candidate worked. Failures
  // and errors are what CI must look at: no tier reached, an executor failed, a candidate unable to run,
  // the baseline not measured, an interrupted run. A candidate the budget never reached is skipped.
  struct Case {
    std::string name, kind, message, out;  // kind: "" pass, "failure", "error", "skipped"
  };
  std::vector<std::pair<std::string, std::vector<Case>>> suites;
  const json& outcome = obj(r, "outcome");
  const std::string demanded = str(outcome, "fail_if_no_tier");
  {
    std::vector<Case> run;
    const json& b = obj(r, "baseline");
    run.push_back({"baseline measured", get(b, "seconds") > 0 ? "" : "error",
                   get(b, "seconds") > 0 ? "" : "the baseline was not measured: " + str(b, "reason"),
                   timing_text(obj(b, "timing"))});
    run.push_back({"not interrupted", r.contains("interrupted") ? "error" : "",
                   r.contains("interrupted")
                       ? "interrupted by " + str(obj(r, "interrupted"), "name") + "; continue with --resume"
                       : "",
                   ""});
    const int code = outcome.value("exit_code", 0);
    run.push_back({"outcome", code ? "failure" : "",
                   code ? "exit " + std::to_string(code) + ": " + join(arr(outcome, "problems"), "; ") : "",
                   join(arr(outcome, "warnings"), "\n")});
    suites.push_back({"run", run});
  }
  {
    std::vector<Case> ex;
    for (const auto& e : arr(r, "executors")) {
      const std::string st = e.value("state", "");
      const bool bad = st == "failed" || st == "killed";
      ex.push_back({e.value("family", "?"),
                    bad               ? "error"
                    : st == "skipped" ? "skipped"
                                      : "",
                    bad || st == "skipped" ? "executor " + st + ": " + str(e, "reason") : "", explored_summary(e)});
    }
    suites.push_back({"executors", ex});
  }
  {
    std::vector<Case> tiers;
    bool any = false;
    for (const char* k : kBuckets) {
      const json& t = r["tiers"].value(k, json());
      any = any || !t.is_null();
      const std::string notes = join(arr(obj(r, "tier_notes"), k), "; ");
      if (!t.is_null())
        tiers.push_back({k, "", "", t.value("manifest", "") + " at " + num(get(t, "speedup")) + "x"});
      else
        tiers.push_back({k, demanded == k ? "failure" : "skipped",
                         "no tier reached for " + std::string(k) + (notes.empty() ? "" : ": " + notes), ""});
    }
    tiers.insert(tiers.begin(), {"any tier reached", any ? "" : "failure",
                                 any ? "" : "no tier reached: " + join(arr(obj(r, "tier_notes"), "1.5x"), "; "), ""});
    suites.push_back({"tiers", tiers});
  }
  for (const auto& c : arr(r, "candidates")) {
    std::vector<Case> cs;
    // Never gated (the budget went to the candidates ranked above it) is not a failure of the product: skipped, with
    // why.
    if (!gated(c))
      cs.push_back({"gated", "skipped", "never gated: " + c.value("not_gated_reason", std::string("not gated")), ""});
    else if (could_not_run(c))
      cs.push_back({"gated", "error", "could not run: " + verdict_reason(c), ""});
    else {
      cs.push_back({"gated", "", "", verdict_word(c) + ": " + verdict_reason(c)});
      for (const auto& [g, x] : obj(c, "verdicts").items())
        cs.push_back(
            {g, "", "", std::string(x.value("pass", false) ? "pass: " : "rejected: ") + x.value("reason", "")});
    }
    suites.push_back({c.value("id", ""), cs});
  }
  std::ostringstream o;
  int tests = 0, failures = 0, errors = 0;
  for (const auto& [n, cs] : suites)
    for (const auto& c : cs) ++tests, failures += c.kind == "failure", errors += c.kind == "error";
  o << "<?xml version='1.0' encoding='UTF-8'?>\n<testsuites name='autooptim " << esc(r.value("model", ""))
    << "' tests='" << tests << "' failures='" << failures << "' errors='" << errors << "'>\n";
  for (const auto& [name, cs] : suites) {
    int f = 0, e = 0, s = 0;
    for (const auto& c : cs) f += c.kind == "failure", e += c.kind == "error", s += c.kind == "skipped";
    o << "  <testsuite name='" << esc(name) << "' tests='" << cs.size() << "' failures='" << f << "' errors='" << e
      << "' skipped='" << s << "'>\n";
    for (const auto& c : cs) {
      o << "    <testcase classname='" << esc(name) << "' name='" << esc(c.name) << "'>";
      if (!c.kind.empty()) o << "<" << c.kind << " message='" << esc(c.message) << "'/>";
      if (!c.out.empty()) o << "<system-out>" << esc(c.out) << "</system-out>";
      o << "</testcase>\n";
    }
    o << "  </testsuite>\n";
  }
  o << "</testsuites>\n";
  return o.str();
}

namespace {

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = static_cast<unsigned char>(bytes[i]);
    const uint32_t b1 = i + 1 < bytes.size() ? static_cast<unsigned char>(bytes[i + 1]) : 0;
    const uint32_t b2 = i + 2 < bytes.size() ? static_cast<unsigned char>(bytes[i + 2]) : 0;
    const uint32_t v = (b0 << 16) | (b1 << 8) | b2;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? k[v & 63] : '=';
  }
  return out;
}

// The clips of report.html as data: URIs while they are small (the tiny model's are tens of kB), so the page
// stays whole when copied; past the budget (official-size clips are megabytes) they stay links beside it.
std::function<std::string(const std::string&)> embedding_clips(const fs::path& dir) {
  auto spent = std::make_shared<uintmax_t>(0);
  return [dir, spent](const std::string& rel) -> std::string {
    constexpr uintmax_t kClip = 4u << 20, kTotal = 48u << 20;
    std::error_code ec;
    const uintmax_t size = fs::file_size(dir / rel, ec);
    if (ec || size > kClip || *spent + size > kTotal) return rel;
    std::ifstream in(dir / rel, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (!in && !in.eof()) return rel;
    *spent += size;
    const std::string mime = fs::path(rel).extension() == ".mp4" ? "video/mp4" : "application/octet-stream";
    return "data:" + mime + ";base64," + base64(bytes.str());
  };
}

}  // namespace

void write_reports(const std::string& dir_in, const json& report) {
  const fs::path dir(dir_in);
  fs::create_directories(dir / "tiers");
  write_file(dir / "report.json", report.dump(2) + "\n");
  write_file(dir / "report.md", render_markdown(report));
  write_file(dir / "report.html", render_html(report, embedding_clips(dir)));
  write_file(dir / "junit.xml", render_junit(report));
  for (const char* k : kBuckets) {
    const auto& t = report["tiers"].value(k, json());
    if (!t.is_null() && t.contains("resolved_manifest"))
      write_file(dir / "tiers" / (std::string(k) + ".json"), t["resolved_manifest"].dump(2) + "\n");
    else
      fs::remove(dir / "tiers" / (std::string(k) + ".json"));
  }
}

}  // namespace autooptim::orchestrator
