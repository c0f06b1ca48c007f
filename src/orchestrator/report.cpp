#include "orchestrator/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gates/atomic_file.h"
#include "runtime/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, int prec = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

double get(const json& j, const char* k, double d = 0) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : d; }

void write_file(const fs::path& p, const std::string& s) { gates::write_file_atomic(p.string(), s); }

const char* kBuckets[] = {"1.5x", "2x", "3x", "4x"};

}  // namespace

std::string render_markdown(const json& r) {
  std::ostringstream o;
  o << "# autooptim report: " << r.value("model", "?") << "\n\n";
  const auto& b = r["baseline"];
  o << "Baseline `" << b.value("manifest", "?") << "`: " << num(get(b, "seconds"), 3) << " s per clip on "
    << r.value("device_name", "?") << " (" << r.value("device", "?") << ").\n\n";
  if (!r.value("official_config", true))
    o << "**Reduced configuration** (" << r["config"].dump() << "): measured, but off the official setting, so no tier can be won.\n\n";
  o << "## Tiers\n\n| bucket | manifest | speedup | PSNR (dB) | SSIM | held-out |\n|---|---|---|---|---|---|\n";
  for (const char* k : kBuckets) {
    const auto& t = r["tiers"][k];
    if (t.is_null()) {
      o << "| " << k << " | none reached | | | | |\n";
      continue;
    }
    o << "| " << k << " | `" << t.value("manifest", "") << "` | " << num(get(t, "speedup")) << "x | " << num(get(t, "psnr")) << " | "
      << num(get(t, "ssim"), 4) << " | " << (t.value("heldout_accepted", false) ? "accepted" : "-") << " |\n";
  }
  o << "\nRollback: unset the tier manifest's flags and you are back at the baseline (each tier passed the off-identity gate).\n\n";
  o << "## Candidates\n\n| manifest | family | speedup | PSNR | SSIM | accepted | failed gate |\n|---|---|---|---|---|---|---|\n";
  for (const auto& c : r["candidates"]) {
    std::string failed;
    for (const auto& [g, v] : c["verdicts"].items())
      if (!v.value("pass", true)) failed += (failed.empty() ? "" : ", ") + g;
    o << "| `" << c.value("id", "") << "` | " << c.value("family", "") << " | " << num(get(c, "speedup")) << "x | " << num(get(c, "psnr"))
      << " | " << num(get(c, "ssim"), 4) << " | " << (c.value("accepted", false) ? "yes" : "no") << " | " << failed << " |\n";
  }
  return o.str();
}

std::string render_html(const json& r) {
  std::ostringstream o;
  const auto& cands = r["candidates"];
  // Pareto plot: speedup (x, log2) against PSNR (y), accepted filled, rejected hollow.
  const double W = 640, H = 380, L = 60, B = 50, T = 20, R = 20;
  double xmax = 2, ymin = 20, ymax = 60;
  for (const auto& c : cands) {
    xmax = std::max(xmax, get(c, "speedup") * 1.15);
    const double p = std::min(get(c, "psnr"), 100.0);
    if (p > 0) ymin = std::min(ymin, std::floor(p / 5) * 5), ymax = std::max(ymax, std::ceil(p / 5) * 5);
  }
  auto X = [&](double s) { return L + (W - L - R) * std::log2(std::max(s, 0.5) / 0.5) / std::log2(xmax / 0.5); };
  auto Y = [&](double p) { return H - B - (H - B - T) * (std::clamp(p, ymin, ymax) - ymin) / (ymax - ymin); };
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' role='img' aria-label='speed and quality of every candidate'>";
  svg << "<rect x='0' y='0' width='" << W << "' height='" << H << "' fill='#fff'/>";
  svg << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='#333'/>";
  svg << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='#333'/>";
  for (double s : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0})
    if (s <= xmax) {
      svg << "<line x1='" << X(s) << "' y1='" << T << "' x2='" << X(s) << "' y2='" << H - B << "' stroke='" << (s == 1.0 ? "#999" : "#eee") << "'/>";
      svg << "<text x='" << X(s) << "' y='" << H - B + 16 << "' font-size='11' text-anchor='middle'>" << num(s, 1) << "x</text>";
    }
  for (double p = ymin; p <= ymax; p += 5)
    svg << "<text x='" << L - 6 << "' y='" << Y(p) + 4 << "' font-size='11' text-anchor='end'>" << num(p, 0) << "</text>";
  svg << "<text x='" << (L + W - R) / 2 << "' y='" << H - 10 << "' font-size='12' text-anchor='middle'>speedup over the baseline (log scale)</text>";
  svg << "<text x='14' y='" << (T + H - B) / 2 << "' font-size='12' text-anchor='middle' transform='rotate(-90 14 " << (T + H - B) / 2
      << ")'>worst-clip PSNR vs baseline (dB)</text>";
  for (const auto& c : cands) {
    const bool ok = c.value("accepted", false);
    const double x = X(get(c, "speedup")), y = Y(std::min(get(c, "psnr"), 100.0));
    svg << "<circle cx='" << x << "' cy='" << y << "' r='5' fill='" << (ok ? "#1a7f37" : "none") << "' stroke='"
        << (ok ? "#1a7f37" : "#cf222e") << "' stroke-width='1.5'><title>" << esc(c.value("id", "")) << ": " << num(get(c, "speedup"))
        << "x, " << num(get(c, "psnr")) << " dB" << (ok ? ", accepted" : ", rejected") << "</title></circle>";
  }
  svg << "</svg>";

  o << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>autooptim report: " << esc(r.value("model", "")) << "</title>";
  o << "<style>body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:70em;color:#1f2328}table{border-collapse:collapse;margin:1em 0}"
       "td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:left}th{background:#f6f8fa}.ok{color:#1a7f37}.no{color:#cf222e}"
       "code{background:#f6f8fa;padding:1px 4px}</style></head><body>";
  o << "<h1>autooptim report: " << esc(r.value("model", "")) << "</h1>";
  const auto& b = r["baseline"];
  o << "<p>Baseline <code>" << esc(b.value("manifest", "")) << "</code>: " << num(get(b, "seconds"), 3) << " s per clip on "
    << esc(r.value("device_name", "")) << ". Weights: " << esc(r.value("weights", "")) << ". Build " << esc(r.value("build", "")) << ".</p>";
  if (!r.value("official_config", true))
    o << "<p><strong>Reduced configuration</strong> " << esc(r["config"].dump()) << ": measured, but off the official setting, so no tier can be won.</p>";
  o << "<h2>Tiers</h2><table><tr><th>bucket</th><th>manifest</th><th>speedup</th><th>PSNR (dB)</th><th>SSIM</th><th>held-out</th><th>rollback</th></tr>";
  for (const char* k : kBuckets) {
    const auto& t = r["tiers"][k];
    if (t.is_null()) {
      o << "<tr><td>" << k << "</td><td colspan='6'>none reached</td></tr>";
      continue;
    }
    o << "<tr><td>" << k << "</td><td><code>" << esc(t.value("manifest", "")) << "</code></td><td>" << num(get(t, "speedup")) << "x</td><td>"
      << num(get(t, "psnr")) << "</td><td>" << num(get(t, "ssim"), 4) << "</td><td>" << (t.value("heldout_accepted", false) ? "accepted" : "-")
      << "</td><td>unset " << esc(t.value("flags", json::object()).dump()) << "</td></tr>";
  }
  o << "</table><h2>Speed and quality</h2>" << svg.str();
  o << "<p>Filled: accepted by every gate. Hollow: rejected (hover for the manifest).</p>";
  o << "<h2>Candidates</h2><table><tr><th>manifest</th><th>family</th><th>speedup</th><th>PSNR</th><th>SSIM</th><th>verdict</th><th>gates</th></tr>";
  for (const auto& c : cands) {
    std::string gates;
    for (const auto& [g, v] : c["verdicts"].items())
      gates += std::string("<span class='") + (v.value("pass", false) ? "ok" : "no") + "' title='" + esc(v.value("reason", "")) + "'>" +
               esc(g) + "</span> ";
    const bool ok = c.value("accepted", false);
    o << "<tr><td><code>" << esc(c.value("id", "")) << "</code></td><td>" << esc(c.value("family", "")) << "</td><td>" << num(get(c, "speedup"))
      << "x</td><td>" << num(get(c, "psnr")) << "</td><td>" << num(get(c, "ssim"), 4) << "</td><td class='" << (ok ? "ok'>accepted" : "no'>rejected")
      << "</td><td>" << gates << "</td></tr>";
  }
  o << "</table></body></html>\n";
  return o.str();
}

std::string render_junit(const json& r) {
  std::ostringstream o;
  o << "<?xml version='1.0' encoding='UTF-8'?>\n<testsuites name='autooptim " << esc(r.value("model", "")) << "'>\n";
  for (const auto& c : r["candidates"]) {
    const auto& v = c["verdicts"];
    int failures = 0;
    for (const auto& [g, x] : v.items()) failures += !x.value("pass", false);
    o << "  <testsuite name='" << esc(c.value("id", "")) << "' tests='" << v.size() << "' failures='" << failures << "'>\n";
    for (const auto& [g, x] : v.items()) {
      o << "    <testcase classname='" << esc(c.value("id", "")) << "' name='" << esc(g) << "'>";
      if (!x.value("pass", false)) o << "<failure message='" << esc(x.value("reason", "")) << "'/>";
      o << "</testcase>\n";
    }
    o << "  </testsuite>\n";
  }
  o << "</testsuites>\n";
  return o.str();
}

void write_reports(const std::string& dir_in, const json& report) {
  const fs::path dir(dir_in);
  fs::create_directories(dir / "tiers");
  write_file(dir / "report.json", report.dump(2) + "\n");
  write_file(dir / "report.md", render_markdown(report));
  write_file(dir / "report.html", render_html(report));
  write_file(dir / "junit.xml", render_junit(report));
  for (const char* k : kBuckets) {
    const auto& t = report["tiers"][k];
    if (!t.is_null() && t.contains("resolved_manifest")) write_file(dir / "tiers" / (std::string(k) + ".json"), t["resolved_manifest"].dump(2) + "\n");
    else fs::remove(dir / "tiers" / (std::string(k) + ".json"));
  }
}

}  // namespace autooptim::orchestrator
