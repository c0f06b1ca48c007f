#include "orchestrator/compare.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "orchestrator/report.h"
#include "base/error.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

// The oldest report layout compare reads (version 2: tiers with speedup/psnr, candidates with timings).
constexpr int kOldestSchema = 2;
const char* const kBuckets[] = {"1.5x", "2x", "3x", "4x"};

double num_or(const json& j, const char* k, double d) {
  return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>() : d;
}
std::string str_or(const json& j, const char* k, const std::string& d = "") {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : d;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string pct(double rel) { return fmt("%+.1f%%", 100 * rel); }

// The spread recorded in a timing summary {median_s,min_s,max_s,spread,...}; recomputed from min/max
// when only those are there; negative when the summary is missing.
double spread_of(const json& t) {
  if (!t.is_object()) return -1;
  if (t.contains("spread") && t["spread"].is_number()) return t["spread"].get<double>();
  const double med = num_or(t, "median_s", 0), lo = num_or(t, "min_s", -1), hi = num_or(t, "max_s", -1);
  return med > 0 && lo >= 0 && hi >= lo ? (hi - lo) / med : -1;
}

// The report's identification for the header: timestamp and build commit.
json describe(const json& r, const std::string& path) {
  const json env = r.value("environment", json::object());
  return {{"path", path},
          {"timestamp", str_or(env, "timestamp")},
          {"commit", str_or(env.value("build", json::object()), "commit")},
          {"device_name", str_or(r, "device_name")},
          {"schema_version", r.value("schema_version", 0)}};
}

void check_report(const json& r, const std::string& path) {
  auto bad = [&](const std::string& what) {
    throw Error(path + ": not an autooptim report.json that compare can read: " + what);
  };
  if (!r.is_object()) bad("the top level is not a JSON object");
  if (!r.contains("schema_version") || !r["schema_version"].is_number_integer()) bad("no integer \"schema_version\"");
  const int v = r["schema_version"].get<int>();
  if (v < kOldestSchema) bad("schema_version " + std::to_string(v) + " is older than " + std::to_string(kOldestSchema));
  if (!r.contains("model") || !r["model"].is_string()) bad("no \"model\" string");
  if (!r.contains("baseline") || !r["baseline"].is_object()) bad("no \"baseline\" object");
  if (r["baseline"].contains("seconds") && !r["baseline"]["seconds"].is_number())
    bad("\"baseline.seconds\" is not a number");
  if (!r.contains("tiers") || !r["tiers"].is_object()) bad("no \"tiers\" object");
  for (const auto& [bucket, t] : r["tiers"].items()) {
    if (t.is_null()) continue;
    if (!t.is_object()) bad("tier " + bucket + " is neither null nor an object");
    for (const char* k : {"speedup", "psnr"})
      if (!t.contains(k) || !t[k].is_number()) bad("tier " + bucket + " has no number \"" + k + "\"");
    if (!t.contains("manifest") || !t["manifest"].is_string()) bad("tier " + bucket + " has no \"manifest\"");
  }
  if (r.contains("candidates") && !r["candidates"].is_array()) bad("\"candidates\" is not an array");
}

}  // namespace

json load_report_for_compare(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": no such file (expected a run's report.json)");
  if (fs::is_directory(path, ec)) throw Error(path + ": is a folder; give its report.json");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  json r;
  try {
    r = json::parse(ss.str());
  } catch (const json::exception& e) {  // a syntax error, or a number out of range
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  check_report(r, path);
  return r;
}

double tier_noise(const json& report, const json& tier, std::string* how) {
  const std::string id = str_or(tier, "manifest");
  for (const auto& c : report.value("candidates", json::array())) {
    if (!c.is_object() || str_or(c, "id") != id) continue;
    const double b = spread_of(c.value("baseline_timing", json())), k = spread_of(c.value("candidate_timing", json()));
    if (b >= 0 || k >= 0) {
      if (how) *how = "timing spread";
      return std::max(std::max(b, k), 0.0);
    }
  }
  // Not recorded (an older or a hand-made report): the gate's own minimum margin stands in for it.
  const json th = report.value("environment", json::object()).value("thresholds", json::object());
  if (th.contains("min_margin") && th["min_margin"].is_number()) {
    if (how) *how = "gate margin (timing spread not recorded)";
    return th["min_margin"].get<double>();
  }
  if (how) *how = "not recorded (0)";
  return 0.0;
}

namespace {

// A regression: one sentence in the list the exit status reads and in the result's.
void regress(Comparison& c, const std::string& s) {
  c.regressions.push_back(s);
  c.result["regressions"].push_back(s);
}

// The baseline: slower beyond both runs' timing spread, on the same device and configuration (comparable).
json compare_baseline(const json& o, const json& n, const CompareOptions& opt, bool comparable, Comparison& c) {
  const json& ob = o["baseline"];
  const json& nb = n["baseline"];
  const double os = num_or(ob, "seconds", 0), ns = num_or(nb, "seconds", 0);
  const double on = std::max(spread_of(ob.value("timing", json())), 0.0),
               nn = std::max(spread_of(nb.value("timing", json())), 0.0);
  const double allowed = std::min(on + nn, opt.max_noise);
  json b = {{"old_seconds", os}, {"new_seconds", ns},        {"old_noise", on},
            {"new_noise", nn},   {"allowed_noise", allowed}, {"status", "unchanged"}};
  if (ns <= 0 && os > 0) {
    b["status"] = "regression";
    regress(c, "baseline: the new run measured no baseline" +
                   (str_or(nb, "reason").empty() ? std::string() : " (" + str_or(nb, "reason") + ")"));
  } else if (os > 0 && ns > 0) {
    const double rel = ns / os - 1;
    b["change"] = rel;
    if (rel > allowed) {
      b["status"] = comparable ? "regression" : "slower (not comparable)";
      if (comparable)
        regress(c, "baseline: " + fmt("%.3f", os) + " s -> " + fmt("%.3f", ns) + " s (" + pct(rel) +
                       ", beyond the noise of " + fmt("%.1f%%", 100 * allowed) + ")");
    } else if (rel < -allowed) {
      b["status"] = "faster";
    }
  }
  return b;
}

// The tiers to compare: the fixed buckets first, then any other bucket either report has.
std::vector<std::string> tier_buckets(const json& o, const json& n) {
  std::vector<std::string> buckets(std::begin(kBuckets), std::end(kBuckets));
  std::set<std::string> known(buckets.begin(), buckets.end());
  for (const json* r : {&o, &n})
    for (const auto& [k, v] : (*r)["tiers"].items())
      if (known.insert(k).second) buckets.push_back(k);
  return buckets;
}

// What a report's tier reached (null when it reached none).
json tier_figures(const json& t) {
  return t.is_object() ? json{{"manifest", t["manifest"]},
                              {"speedup", t["speedup"]},
                              {"psnr", t["psnr"]},
                              {"ssim", t.value("ssim", 0.0)}}
                       : json();
}

// A tier both runs reached (ot, nt): its changes into t, a regression when its speedup dropped beyond the
// noise or its worst PSNR beyond the tolerance.
void compare_reached_tier(const json& o, const json& n, const json& ot, const json& nt, const std::string& bucket,
                          const CompareOptions& opt, json& t, Comparison& c) {
  std::string how_o, how_n;
  const double on = tier_noise(o, ot, &how_o), nn = tier_noise(n, nt, &how_n);
  const double os = ot["speedup"].get<double>(), ns = nt["speedup"].get<double>();
  const double rel = os > 0 ? ns / os - 1 : 0;
  const double op = ot["psnr"].get<double>(), np = nt["psnr"].get<double>();
  // Capped PSNR is "identical": both at the cap is no change whatever the stored figure.
  const double dpsnr = (op >= kIdenticalPsnr && np >= kIdenticalPsnr)
                           ? 0.0
                           : std::min(np, kIdenticalPsnr) - std::min(op, kIdenticalPsnr);
  t["speedup_change"] = rel;
  t["psnr_change_db"] = dpsnr;
  t["ssim_change"] = nt.value("ssim", 0.0) - ot.value("ssim", 0.0);
  // Each speedup is uncertain by its own run's spread: a drop counts when it exceeds both together, bounded
  // by max_noise (CompareOptions).
  const double allowed = std::min(on + nn, opt.max_noise);
  t["noise"] = {{"old", on},           {"new", nn},          {"old_source", how_o},
                {"new_source", how_n}, {"allowed", allowed}, {"bound", opt.max_noise}};
  std::vector<std::string> why;
  if (rel < -allowed)
    why.push_back("speedup " + fmt("%.2fx", os) + " -> " + fmt("%.2fx", ns) + " (" + pct(rel) +
                  ", beyond the noise of " + fmt("%.1f%%", 100 * allowed) + ")");
  if (dpsnr < -opt.psnr_tolerance_db)
    why.push_back("worst PSNR " + quality_text(op, true) + " -> " + quality_text(np, true) + " (" +
                  fmt("%+.2f dB", dpsnr) + ", tolerance " + fmt("%.2f dB", opt.psnr_tolerance_db) + ")");
  if (!why.empty()) {
    t["status"] = "regression";
    std::string s = "tier " + bucket + ": ";
    for (size_t i = 0; i < why.size(); ++i) s += (i ? "; " : "") + why[i];
    regress(c, s);
  } else if (rel > on + nn) {
    t["status"] = "faster";
  } else {
    t["status"] = "unchanged";
  }
  if (ot["manifest"] != nt["manifest"]) t["candidate_changed"] = true;
}

// One bucket of both reports: reached by neither, lost, new, or compared.
json compare_tier(const json& o, const json& n, const std::string& bucket, const CompareOptions& opt, Comparison& c) {
  const json ot = o["tiers"].value(bucket, json()), nt = n["tiers"].value(bucket, json());
  json t = {{"tier", bucket}, {"old", tier_figures(ot)}, {"new", tier_figures(nt)}};
  if (!ot.is_object() && !nt.is_object()) {
    t["status"] = "not reached";
  } else if (!nt.is_object()) {
    t["status"] = "regression";
    regress(c, "tier " + bucket + ": lost (was " + ot["manifest"].get<std::string>() + " at " +
                   fmt("%.2fx", ot["speedup"].get<double>()) + ")");
  } else if (!ot.is_object()) {
    t["status"] = "new";
  } else {
    compare_reached_tier(o, n, ot, nt, bucket, opt, t, c);
  }
  return t;
}

}  // namespace

Comparison compare_reports(const json& o, const json& n, const CompareOptions& opt, const std::string& old_label,
                           const std::string& new_label) {
  Comparison c;
  json& res = c.result;
  res = {{"old", describe(o, old_label)}, {"new", describe(n, new_label)}, {"tiers", json::array()},
         {"regressions", json::array()},  {"notes", json::array()},        {"psnr_tolerance_db", opt.psnr_tolerance_db},
         {"max_noise", opt.max_noise}};
  const std::string model = o["model"].get<std::string>();
  if (n["model"].get<std::string>() != model)
    throw Error("the reports are of different models (" + model + " and " + n["model"].get<std::string>() +
                "): nothing to compare");
  res["model"] = model;
  auto note = [&](const std::string& s) { res["notes"].push_back(s); };
  const bool same_device = str_or(o, "device_name") == str_or(n, "device_name");
  const bool same_config = o.value("config", json()) == n.value("config", json());
  if (!same_device)
    note("different devices (" + str_or(o, "device_name", "?") + " and " + str_or(n, "device_name", "?") +
         "): baseline seconds are not compared for regressions");
  if (!same_config)
    note("different run configurations (frames/size/steps): baseline seconds are not compared for regressions");
  if (o["schema_version"] != n["schema_version"])
    note("report schema versions differ (" + o["schema_version"].dump() + " and " + n["schema_version"].dump() +
         "); only the fields both have are compared");
  if (n.contains("interrupted")) note("the new run was interrupted: what it did not reach counts as lost");

  res["baseline"] = compare_baseline(o, n, opt, same_device && same_config, c);
  for (const auto& bucket : tier_buckets(o, n)) res["tiers"].push_back(compare_tier(o, n, bucket, opt, c));
  return c;
}

std::string render_comparison(const Comparison& c) {
  const json& r = c.result;
  std::ostringstream s;
  auto id = [](const json& d) {
    std::string t = d.value("path", std::string());
    const std::string ts = d.value("timestamp", std::string()), commit = d.value("commit", std::string());
    if (!ts.empty() || !commit.empty())
      t += " (" + ts +
           (commit.empty() ? "" : (ts.empty() ? "" : ", ") + std::string("commit ") + commit.substr(0, 12)) + ")";
    return t;
  };
  s << "compare " << r.value("model", std::string()) << "\n  old: " << id(r["old"]) << "\n  new: " << id(r["new"])
    << "\n";
  const json& b = r["baseline"];
  s << "baseline: " << fmt("%.3f s", b.value("old_seconds", 0.0)) << " -> "
    << fmt("%.3f s", b.value("new_seconds", 0.0));
  if (b.contains("change"))
    s << " (" << pct(b["change"].get<double>()) << ", noise +-" << fmt("%.1f%%", 100 * b.value("allowed_noise", 0.0))
      << ")";
  s << "  " << b.value("status", std::string()) << "\n";
  for (const auto& t : r["tiers"]) {
    const std::string status = t.value("status", std::string());
    s << "tier " << t.value("tier", std::string()) << ": ";
    auto side = [](const json& x) {
      if (!x.is_object()) return std::string("not reached");
      return fmt("%.2fx", x.value("speedup", 0.0)) + " at " + quality_text(x.value("psnr", 0.0), true) + " (" +
             x.value("manifest", std::string()) + ")";
    };
    s << side(t["old"]) << " -> " << side(t["new"]);
    if (t.contains("speedup_change"))
      s << "; speedup " << pct(t["speedup_change"].get<double>()) << " (noise +-"
        << fmt("%.1f%%", 100 * t["noise"].value("allowed", 0.0)) << "), worst PSNR "
        << fmt("%+.2f dB", t["psnr_change_db"].get<double>()) << ", SSIM "
        << fmt("%+.4f", t["ssim_change"].get<double>());
    s << "  " << (status == "regression" ? "REGRESSION" : status) << "\n";
  }
  for (const auto& n : r["notes"]) s << "note: " << n.get<std::string>() << "\n";
  if (c.regressions.empty()) {
    s << "result: no regression beyond the recorded noise\n";
  } else {
    s << "result: " << c.regressions.size() << " regression(s)\n";
    for (const auto& x : c.regressions) s << "  - " << x << "\n";
  }
  return s.str();
}

}  // namespace autooptim::orchestrator
