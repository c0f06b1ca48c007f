#pragma once
// The run's deliverables: report.json (machines), report.md (CI summaries), report.html (one
// self-contained page: Pareto plot and tier table, no network), junit.xml (suite = manifest, case =
// gate) and tiers/<bucket>.json (the manifests that reproduce each tier).
#include <nlohmann/json.hpp>
#include <functional>
#include <string>

namespace autooptim::orchestrator {

// report: the report.json object ({"model","baseline","tiers","candidates",...}); writes every file
// into dir.
void write_reports(const std::string& dir, const nlohmann::json& report);

// A worst-clip PSNR at or above this is bit-identical output (the metrics' cap): printed "identical".
constexpr double kIdenticalPsnr = 100.0;

// "identical" for capped PSNR, "31.20 dB" otherwise, "-" when not measured.
std::string quality_text(double psnr, bool measured);
// A timing summary {median_s,min_s,max_s,spread,runs_s} as "1.234 s (1.200-1.270, spread 5.0%, 3 runs)".
std::string timing_text(const nlohmann::json& t);

std::string render_markdown(const nlohmann::json& report);
// clip_src maps a clip's path (relative to the run folder) to the <video>'s src; write_reports embeds small
// clips as data: URIs so that report.html stays whole when copied elsewhere.
std::string render_html(const nlohmann::json& report,
                        const std::function<std::string(const std::string&)>& clip_src = {});
std::string render_junit(const nlohmann::json& report);

}  // namespace autooptim::orchestrator
