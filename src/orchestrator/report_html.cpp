// report.html: one self-contained page (the speed/quality plot, the tables, the clips; no network), one
// section per function in the page's order.
#include "orchestrator/report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "orchestrator/report_agents.h"
#include "orchestrator/report_text.h"

using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

using report_text::arr;
using report_text::by_category;
using report_text::could_not_run;
using report_text::deploy_text;
using report_text::esc;
using report_text::explored_summary;
using report_text::gate_prompts_text;
using report_text::gated;
using report_text::get;
using report_text::heldout_text;
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

using ClipSrc = std::function<std::string(const std::string&)>;

// Speed/quality plot of the gated candidates: speedup (x, log2) against worst-clip PSNR (y). Identical
// output sits on a band at the top; never-gated candidates are listed, not plotted (no numbers).
struct SpeedQualityPlot {
  static constexpr double W = 760, H = 420, L = 60, B = 50, T = 34, R = 150;  // size and margins, pixels
  explicit SpeedQualityPlot(const json& candidates);
  double X(double s) const;
  double Y(double p) const;
  std::string svg(double floor_db) const;
  // The axes, their grid and labels, the tier thresholds and the quality floor.
  void axes(std::ostream& svg, double floor_db) const;
  // Each gated candidate's point, numbered as in the candidates table, and the legend that names them.
  void points(std::ostream& svg) const;

  const json& cands;
  double xmax = 4.5, ymin = 10, ymax = 50;
  double yid;  // the "identical" band
};

SpeedQualityPlot::SpeedQualityPlot(const json& candidates) : cands(candidates) {
  for (const auto& c : cands) {
    if (!gated(c) || could_not_run(c)) continue;
    xmax = std::max(xmax, get(c, "speedup") * 1.15);
    const double p = get(c, "psnr");
    if (p > 0 && p < kIdenticalPsnr)
      ymin = std::min(ymin, std::floor(p / 5) * 5), ymax = std::max(ymax, std::ceil(p / 5) * 5);
  }
  yid = ymax + 8;
}

double SpeedQualityPlot::X(double s) const {
  return L + (W - L - R) * std::log2(std::max(s, 0.5) / 0.5) / std::log2(xmax / 0.5);
}

double SpeedQualityPlot::Y(double p) const {
  return H - B - (H - B - T) * (std::clamp(p >= kIdenticalPsnr ? yid : p, ymin, yid) - ymin) / (yid - ymin);
}

std::string SpeedQualityPlot::svg(double floor_db) const {
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
      << "' role='img' aria-label='speed and quality of every gated candidate'>";
  svg << "<rect x='0' y='0' width='" << W << "' height='" << H << "' fill='#fff'/>";
  axes(svg, floor_db);
  points(svg);
  svg << "</svg>";
  return svg.str();
}

void SpeedQualityPlot::axes(std::ostream& svg, double floor_db) const {
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
}

void SpeedQualityPlot::points(std::ostream& svg) const {
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
}

// The page's head and title, an interruption, and the outcome with its problems and warnings.
void html_outcome(std::ostream& o, const json& r) {
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
}

// The baseline's time and what it is; a reduced configuration said.
void html_baseline(std::ostream& o, const json& r) {
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
}

// The tiers and the buckets none reached, with their notes.
void html_tiers(std::ostream& o, const json& r) {
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
  o << "</table>";
}

void html_plot(std::ostream& o, const json& r) {
  const double floor_db = get(obj(obj(r, "environment"), "thresholds"), "min_psnr_db", 30.0);
  o << "<h2>Speed and quality</h2>" << SpeedQualityPlot(arr(r, "candidates")).svg(floor_db);
  o << "<p>Filled circle: accepted by every gate. Cross: rejected. Numbers refer to the candidates table. Dashed blue: "
       "the tier thresholds; dashed "
       "orange: the quality floor of lossy candidates. Never-gated candidates have no measurement and are not "
       "plotted.</p>";
}

void html_candidates(std::ostream& o, const json& r) {
  const json& cands = arr(r, "candidates");
  int n = 0;
  o << "<h2>Candidates</h2><p>" << esc(gate_prompts_text(r))
    << "</p><table><tr><th>#</th><th>manifest</th><th>family</th><th>verdict</th><th>speedup</th><th>baseline "
       "s</th><th>candidate s</th>"
       "<th>worst PSNR</th><th>SSIM</th><th>gates</th></tr>";
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
}

// A clip's <video>, its source through clip_src; "-" for no clip.
std::string video(const std::string& path, const ClipSrc& clip_src) {
  return path.empty()
             ? std::string("-")
             : "<video controls muted loop width='320' src='" + esc(clip_src ? clip_src(path) : path) + "'></video>";
}

// The candidates whose clips are shown beside the baseline's: each tier's, or the accepted candidates (4 at
// most) when no tier was reached; label: "tier 2x", "accepted".
struct ShownClips {
  std::vector<const json*> shown;
  std::vector<std::string> shown_label;
};

ShownClips shown_clips(const json& r) {
  const json& cands = arr(r, "candidates");
  ShownClips s;
  std::vector<const json*>& shown = s.shown;
  std::vector<std::string>& shown_label = s.shown_label;
  for (const auto& row : tier_rows(r))
    for (const auto& c : cands)
      if (c.value("id", "") == row.tier.value("manifest", ""))
        shown.push_back(&c), shown_label.push_back("tier " + row.buckets);
  if (shown.empty())
    for (const auto& c : cands)
      if (c.value("accepted", false) && !obj(c, "clips").empty() && shown.size() < 4)
        shown.push_back(&c), shown_label.push_back("accepted");
  return s;
}

// Each shown candidate's held-out clips (prompts not shown).
void html_heldout_clips(std::ostream& o, const json& r, const ShownClips& s, const ClipSrc& clip_src) {
  const std::vector<const json*>& shown = s.shown;
  for (size_t k = 0; k < shown.size(); ++k) {
    const json& h = obj(*shown[k], "heldout");
    if (obj(h, "clips").empty()) continue;
    o << "<h3>Held-out clips of <code>" << esc(shown[k]->value("id", "")) << "</code> ("
      << esc(r.value("heldout_split", ""))
      << "; prompts not shown: they never leave the "
         "harness)</h3><table><tr><th>prompt</th><th>clip</th><th>PSNR</th></tr>";
    const json& q = obj(h, "quality_by_prompt");
    for (const auto& [id, path] : obj(h, "clips").items())
      o << "<tr><td><code>" << esc(id) << "</code></td><td>"
        << video(path.is_string() ? path.get<std::string>() : "", clip_src) << "</td><td>"
        << (q.contains(id) ? quality_text(get(q[id], "psnr"), true) : "-") << "</td></tr>";
    o << "</table>";
  }
}

// Clips: per prompt, the baseline once and each tier beside it (the accepted candidates when no tier was
// reached), then each tier's held-out clips. Sources go through clip_src (data: URIs when written to disk).
void html_clips(std::ostream& o, const json& r, const ClipSrc& clip_src) {
  const json& b = obj(r, "baseline");
  const json& base_clips = obj(b, "clips");
  const ShownClips s = shown_clips(r);
  const std::vector<const json*>& shown = s.shown;
  const std::vector<std::string>& shown_label = s.shown_label;
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
        << video(bp.is_string() ? bp.get<std::string>() : "", clip_src) << "</td>";
      for (const json* c : shown) {
        const json& q = obj(*c, "quality_by_prompt");
        o << "<td>" << video(str(obj(*c, "clips"), id.c_str()), clip_src) << "<br>"
          << (q.contains(id) ? quality_text(get(q[id], "psnr"), true) : "-") << "</td>";
      }
      o << "</tr>";
    }
    o << "</table>";
    html_heldout_clips(o, r, s, clip_src);
  }
}

// Quality per category and prompt.
void html_quality_by_category(std::ostream& o, const json& r) {
  const json& cands = arr(r, "candidates");
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
}

void html_heldout(std::ostream& o, const json& r) {
  const json& cands = arr(r, "candidates");
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
  o << "</ul>";
}

void html_explored(std::ostream& o, const json& r) {
  o << "<h2>What each executor explored</h2>";
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
}

void html_device_time(std::ostream& o, const json& r) {
  const json& ds = obj(r, "device_seconds");
  o << "<h2>Device time</h2><p>" << esc(ds.value("kind", std::string("device")))
    << "-seconds: " << num(get(ds, "total_s"), 0) << " (" << get(ds, "devices", 1) << " device; gating "
    << num(get(ds, "gating_s"), 0) << " s, exploration " << num(get(ds, "exploration_s"), 0) << " s); "
    << r.value("gate_runs", 0) << " gate runs.</p>";
}

void html_environment(std::ostream& o, const json& r) {
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
  o << "</table>";
}

}  // namespace

std::string render_html(const json& r, const ClipSrc& clip_src) {
  std::ostringstream o;
  html_outcome(o, r);
  html_baseline(o, r);
  html_tiers(o, r);
  html_plot(o, r);
  html_candidates(o, r);
  html_clips(o, r, clip_src);
  html_quality_by_category(o, r);
  html_heldout(o, r);
  html_explored(o, r);
  html_agents(o, r);
  html_device_time(o, r);
  html_environment(o, r);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace autooptim::orchestrator
