#pragma once
// The manifest: the unit of work. A small JSON file naming a run (model, resolved config) and the
// runtime switches it turns on, plus the manifest whose time is its denominator. Parsing is strict:
// unknown keys, wrong types and out-of-range values are errors naming the file and the key path.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "redteam/redteam_options.h"
#include "runtime/options.h"

namespace autooptim::gates {

// The resolved generation settings of one run.
struct RunConfig {
  int64_t height = 0;
  int64_t width = 0;
  int64_t frames = 0;
  double fps = 0;
  int64_t steps = 0;
  double guidance = 0;
  int64_t seed = 0;
  double flow_shift = 0;
  std::optional<double> guidance_2;  // the second expert's guidance scale (two-expert models only)

  bool operator==(const RunConfig& other) const;
  bool operator!=(const RunConfig& other) const { return !(*this == other); }
};

struct Manifest {
  std::string id;
  std::string kind;                                 // baseline | patch | control
  std::string family;                               // none | kernel | cache | sparse | composite
  std::string model;                                // wan22-ti2v-5b | wan22-tiny
  std::string runtime;                              // e.g. "autooptim/1"
  std::optional<std::string> base;                  // null only for a baseline
  nlohmann::json flags = nlohmann::json::object();  // as written (validated), less "redteam"; to_json resolves it
  // The red-team switches ("redteam" in the flags as written): none unless the parser allowed them.
  redteam::RedTeamOptions redteam;
  bool lossless = false;
  RunConfig config;
  std::string description;
  std::vector<std::string> parents;  // the manifests a composition was built from
  // The technique plugin its flags need (runtime/plugin.h): the sha256 of the shared object, "" for none. It
  // must be loaded in the process that parses the manifest, and every plugin technique it turns on is that one's.
  std::string plugin;
};

// What a parser accepts beyond the format itself.
struct ParseOptions {
  // Red-team flags ("redteam": {<switch>: true}, the switches of redteam::RedTeamOptions) are refused unless
  // allowed: only the harness's own tests (gate --allow-redteam) allow them, with a worker that allows them.
  bool allow_redteam = false;
};

// Validates `j` and builds a Manifest. `source_label` (usually the file path) prefixes every error.
Manifest parse_manifest(const nlohmann::json& j, const std::string& source_label, const ParseOptions& options = {});
// Reads and parses a manifest file; a duplicated key in any object is an error too.
Manifest load_manifest(const std::string& path, const ParseOptions& options = {});

// The resolved manifest: every flag present with its value (defaults filled in), keys sorted.
nlohmann::json to_json(const Manifest& m);
nlohmann::json to_json(const RunConfig& c);
// sha256 of the canonical resolved JSON without id and description: manifests that differ only
// cosmetically (key order, defaulted flags written out or not, 5 vs 5.0) hash the same.
std::string manifest_hash(const Manifest& m);

runtime::RuntimeOptions to_runtime_options(const Manifest& m);
// The full resolved flags object of a RuntimeOptions (canonical form of "flags"), and with red-team switches
// (present only when one is on, so an ordinary manifest's canonical form and hash never mention them).
nlohmann::json flags_to_json(const runtime::RuntimeOptions& o);
nlohmann::json flags_to_json(const runtime::RuntimeOptions& o, const redteam::RedTeamOptions& r);

// The model's official setting; a run off it can be measured but never win a tier.
RunConfig official_config(const std::string& model);
// A reduced run's configuration: c with each size that is not 0 put in (the CLI has checked the values).
RunConfig with_sizes(RunConfig c, int64_t frames, int64_t steps, int64_t height, int64_t width);

// Technique flags whose resolved value differs from the default, as dotted names
// ("fused_qkv", "easycache.enabled", "sparse.pattern"). dtype, cpu_threads and onednn are not techniques.
std::vector<std::string> technique_flags_set(const Manifest& m);
// The off run for the off-identity gate: the same model, config, dtype, cpu_threads and onednn (and red-team
// switches) with every technique flag at its default. Its id is "<id>.off", kind "control", family "none", lossless,
// base the original's base (the original's id when it is a baseline), parents {original id}.
Manifest with_flags_off(const Manifest& m);

}  // namespace autooptim::gates
