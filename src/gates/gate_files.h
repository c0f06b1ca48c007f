#pragma once
// The gate's fixed-name files under its folder (../docs/harness.md): the split's videos, clips.json,
// trace.json, benchmark.json, quality.json; and the check that every file the verdict relies on parses.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gates/gate.h"
#include "gates/gate_evidence.h"

namespace autooptim::gates {

// ".mp4" where the build can encode video, else ".y4m".
std::string video_ext();

// Writes each split clip's video as <out>/videos/<clip><ext> and probes it; copies the first prompt's to
// <out>/video<ext>. Per clip of evidence.clips: what went wrong ("" when nothing did).
std::vector<std::string> write_clip_videos(const GateEvidence& evidence, const RunConfig& candidate,
                                           const std::string& out_dir);

// clips.json: each judged clip's identity (its 8-bit frames' SHA-256) and the baseline's at the same
// prompt and seed: what `generate --manifest` must reproduce (docs/deploy.md). trace.json, benchmark.json,
// quality.json (quality: per clip metrics, visual: per clip reports).
void write_gate_reports(const GateEvidence& evidence, const GateVerdict& verdict, const nlohmann::json& quality,
                        const nlohmann::json& visual, const std::string& out_dir);

// The artifacts gate also checks that the files it relies on parse back: one that does not fails it.
void check_reports_parse(GateVerdict& verdict, const std::string& out_dir);

}  // namespace autooptim::gates
