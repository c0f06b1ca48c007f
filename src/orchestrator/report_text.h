#pragma once
// The pieces of text that the report's renderers share: report.md (report_markdown.cpp), report.html
// (report_html.cpp) and junit.xml (report.cpp), read from the report.json object. Internal to them.
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace autooptim::orchestrator::report_text {

inline constexpr const char* kBuckets[] = {"1.5x", "2x", "3x", "4x"};

std::string esc(const std::string& s);  // HTML and XML
// Markdown table cells: a | would split the cell.
std::string md(const std::string& s);
std::string num(double v, int prec = 2);

// A field of a report object: the number (d when absent or not a number), the string, the object, the array.
double get(const nlohmann::json& j, const char* k, double d = 0);
std::string str(const nlohmann::json& j, const char* k);
const nlohmann::json& obj(const nlohmann::json& j, const char* k);
const nlohmann::json& arr(const nlohmann::json& j, const char* k);

std::string join(const nlohmann::json& a, const std::string& sep);

bool gated(const nlohmann::json& c);
bool could_not_run(const nlohmann::json& c);
// One word a reader can act on, never a colour alone.
std::string verdict_word(const nlohmann::json& c);
std::string verdict_reason(const nlohmann::json& c);
std::string speedup_text(const nlohmann::json& c);
std::string quality_of(const nlohmann::json& c);

// Mean PSNR per prompt category of one gate run's quality_by_prompt.
std::map<std::string, std::pair<double, int>> by_category(const nlohmann::json& q, const nlohmann::json& categories);
// " id quality id quality ..." of a gate run's quality_by_prompt (worst PSNR of each prompt's clip).
std::string per_prompt_text(const nlohmann::json& q);
std::string explored_summary(const nlohmann::json& e);

// A tier's row: the buckets one manifest won share it ("1.5x, 2x").
struct TierRow {
  std::string buckets;
  nlohmann::json tier;
};
std::vector<TierRow> tier_rows(const nlohmann::json& r);
// The buckets no tier reached, grouped where their notes are the same ("2x, 3x, 4x"): one line each.
std::vector<std::pair<std::string, std::string>> unreached_rows(const nlohmann::json& r);

// How many prompts each gate run judged: the figure every speedup and PSNR of the candidates rests on.
std::string gate_prompts_text(const nlohmann::json& r);
// "on 2 of 8 val prompts" (empty for a report made before the counts were recorded).
std::string prompts_text(const nlohmann::json& t, const char* used, const char* of, const std::string& split);
// The worst PSNR and how far above the floor it is; a margin under 1 dB is flagged.
std::string tier_quality_text(const nlohmann::json& t);
std::string heldout_text(const nlohmann::json& t, const nlohmann::json& r);
// Rollback: the switches the tier turns on (each tier passed the off-identity gate with them off).
std::string rollback_text(const nlohmann::json& t);
std::string deploy_text(const nlohmann::json& t);

}  // namespace autooptim::orchestrator::report_text
