// The run's deliverables written (write_reports), junit.xml, and the pieces of text the renderers share
// (report_text.h); report.md and report.html are rendered in report_markdown.cpp and report_html.cpp.
#include "orchestrator/report.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "gates/agent_names.h"
#include "base/atomic_file.h"
#include "gates/metrics.h"
#include "base/error.h"
#include "orchestrator/report_text.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

using report_text::arr;
using report_text::could_not_run;
using report_text::esc;
using report_text::explored_summary;
using report_text::gated;
using report_text::get;
using report_text::join;
using report_text::kBuckets;
using report_text::num;
using report_text::obj;
using report_text::str;
using report_text::verdict_reason;
using report_text::verdict_word;

void write_file(const fs::path& p, const std::string& s) { gates::write_file_atomic(p.string(), s); }

static_assert(kIdenticalPsnr == gates::kPsnrCap, "identical output is the metrics' PSNR cap");

// The first failed gate and its reason ("" when every gate passed).
std::pair<std::string, std::string> first_failure(const json& c) {
  for (const auto& [g, v] : obj(c, "verdicts").items())
    if (!v.value("pass", true)) return {g, v.value("reason", "")};
  return {"", ""};
}

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

namespace report_text {

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

std::string num(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

double get(const json& j, const char* k, double d) {
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

std::string join(const json& a, const std::string& sep) {
  std::string o;
  for (const auto& x : a)
    if (x.is_string()) o += (o.empty() ? "" : sep) + x.get<std::string>();
  return o;
}

bool gated(const json& c) { return c.value("gated", true); }
bool could_not_run(const json& c) { return c.value("failure_signature", "") == "could-not-run"; }

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

std::string quality_of(const json& c) { return quality_text(get(c, "psnr"), gated(c) && !could_not_run(c)); }

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

std::string gate_prompts_text(const json& r) {
  const json& th = obj(obj(r, "environment"), "thresholds");
  const int64_t max = th.value("max_prompts", int64_t{0});
  const std::string split = r.value("split", "");
  const int64_t all = r.value("split_prompts", int64_t{0});
  const std::string of = all > 0 ? std::to_string(max > 0 ? std::min(max, all) : all) + " of " + std::to_string(all)
                                 : (max > 0 ? "the first " + std::to_string(max) : "all");
  return "Each gate run judged " + of + " " + split + " prompts (--max-prompts), with at most " +
         std::to_string(th.value("timing_repeats", 0)) +
         " timed pairs (one where the worker's earlier baseline runs vouched for the noise; each verdict says how "
         "many); a tier's winner is then confirmed on its held-out split.";
}

std::string prompts_text(const json& t, const char* used, const char* of, const std::string& split) {
  if (!t.contains(used)) return "";
  return " on " + std::to_string(t.value(used, 0)) + " of " + std::to_string(t.value(of, 0)) + " " + split + " prompts";
}

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

}  // namespace report_text

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

// A tier that runs an agent's plugin reproduces only with its file: the run's copy (outbox/<agent>/plugins/)
// beside the tier's manifest, as tiers/<sha256>.so.
void copy_tier_plugin(const fs::path& dir, const std::string& sha) {
  std::error_code ec;
  if (sha.empty() || fs::exists(dir / "tiers" / (sha + ".so"), ec)) return;
  for (const auto& e : fs::directory_iterator(dir / "outbox", ec)) {
    const fs::path kept = gates::agent_plugin_file(e.path().string(), sha);
    if (fs::is_regular_file(kept, ec)) {
      fs::copy_file(kept, dir / "tiers" / (sha + ".so"), ec);
      return;
    }
  }
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
    if (!t.is_null() && t.contains("resolved_manifest")) {
      write_file(dir / "tiers" / (std::string(k) + ".json"), t["resolved_manifest"].dump(2) + "\n");
      copy_tier_plugin(dir, t["resolved_manifest"].value("plugin", std::string()));
    } else {
      fs::remove(dir / "tiers" / (std::string(k) + ".json"));
    }
  }
}

}  // namespace autooptim::orchestrator
