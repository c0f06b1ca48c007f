#pragma once
// The run's deliverables: report.json (machines), report.md (CI summaries), report.html (one
// self-contained page: Pareto plot and tier table, no network), junit.xml (suite = manifest, case =
// gate) and tiers/<bucket>.json (the manifests that reproduce each tier).
#include <nlohmann/json.hpp>
#include <string>

namespace autooptim::orchestrator {

// report: the report.json object ({"model","baseline","tiers","candidates",...}); writes every file
// into dir.
void write_reports(const std::string& dir, const nlohmann::json& report);

std::string render_markdown(const nlohmann::json& report);
std::string render_html(const nlohmann::json& report);
std::string render_junit(const nlohmann::json& report);

}  // namespace autooptim::orchestrator
