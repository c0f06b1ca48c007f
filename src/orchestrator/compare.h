#pragma once
// `autooptim compare OLD/report.json NEW/report.json`: what a nightly sweep asks of two runs' reports.
// Per tier the change in speedup and quality, and the change in the baseline's seconds; a change is a
// regression only beyond the timing noise the two reports recorded (the spread, (max-min)/median, of the
// timed runs of the tier's candidate and of its baseline), so a nightly job does not cry wolf on noise.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace autooptim::orchestrator {

struct CompareOptions {
  // Worst-clip PSNR may drop this much (dB) before a tier's quality counts as regressed. Quality is
  // deterministic (fixed seeds), so this only absorbs numerical differences between builds.
  double psnr_tolerance_db = 0.5;
  // The timing noise a tier's or the baseline's change may hide in: the two runs' recorded spreads added, but
  // never more than this (0.10: 10%). A few runs on a loaded 2-core machine can record 20% each, which would
  // let a 30% regression pass; past the bound a slower run is a regression to look at.
  double max_noise = 0.10;
};

struct Comparison {
  nlohmann::json result;                 // {"old","new","baseline","tiers":[...],"regressions":[...],"notes":[...]}
  std::vector<std::string> regressions;  // one sentence each; empty: no regression
  int exit_code() const { return regressions.empty() ? 0 : 1; }
};

// Reads and checks one report.json. Throws Error naming the file and what is wrong: missing, unreadable,
// not JSON, or not a report of a schema compare knows (schema_version >= 2 with model, baseline, tiers).
nlohmann::json load_report_for_compare(const std::string& path);

// Compares two checked reports (old first; the labels name them in the output, e.g. their paths).
// Throws Error when they cannot be compared (different models).
Comparison compare_reports(const nlohmann::json& old_report, const nlohmann::json& new_report,
                           const CompareOptions& opt = {}, const std::string& old_label = "old",
                           const std::string& new_label = "new");

// The comparison as text: one line per tier and for the baseline, then the verdict.
std::string render_comparison(const Comparison& c);

// The relative timing noise recorded for a tier's candidate in a report: the larger spread of its
// baseline's and its own timed runs (what the gate's performance check calls noise). `how` says where the
// figure came from ("timing spread", "gate margin: noise not recorded", ...).
double tier_noise(const nlohmann::json& report, const nlohmann::json& tier, std::string* how = nullptr);

}  // namespace autooptim::orchestrator
