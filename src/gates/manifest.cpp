#include "gates/manifest.h"
#include "base/strings.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "base/sha256.h"
#include "base/edit_distance.h"
#include "base/error.h"
#include "runtime/techniques/registry.h"
#include "base/json_read.h"
#include "models/model_table.h"

namespace autooptim::gates {
namespace {

using nlohmann::json;

const std::vector<std::string> kTopKeys = {"id",    "kind",     "family", "model",       "runtime", "base",
                                           "flags", "lossless", "config", "description", "parents", "plugin"};
const std::vector<std::string> kOptionalTopKeys = {"description", "parents", "plugin"};
const std::vector<std::string> kConfigKeys = {"height",   "width", "frames",     "fps",       "steps",
                                              "guidance", "seed",  "flow_shift", "guidance_2"};
const std::vector<std::string> kKinds = {"baseline", "patch", "control"};
const std::vector<std::string> kFamilies = {"none", "kernel", "cache", "sparse", "quant", "composite"};
const std::vector<std::string> kModels = models::model_names_sorted();
// The red-team switches' keys, from redteam/redteam_options.h (one table for parsing and printing).
std::vector<std::string> redteam_keys() {
  std::vector<std::string> keys;
  for (const auto& s : redteam::switches()) keys.push_back(s.key);
  return keys;
}
const char* const kRedTeamRefused =
    "red-team flags are only accepted where explicitly allowed (the harness's own tests)";

namespace tech = runtime::techniques;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

using base::join;

using runtime::edit_distance;

std::string suggestion(const std::string& name, const std::vector<std::string>& valid) {
  std::string best;
  size_t best_distance = 3;  // more than two edits away is not a typo
  for (const auto& v : valid) {
    size_t d = edit_distance(name, v);
    if (d < best_distance) best_distance = d, best = v;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > 256) return false;
  const bool chars_ok = std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '/' || c == '-';
  });
  if (!chars_ok) return false;
  // Ids name folders of a run (gates/<id with / as _>/...): no empty, "." or ".." segment.
  size_t start = 0;
  while (true) {
    const size_t slash = id.find('/', start);
    const std::string seg = id.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

// Every error carries the source label and the dotted key path of the offending value.
class Checker {
 public:
  explicit Checker(std::string label) : label_(std::move(label)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    std::string text = label_.empty() ? "" : label_ + ": ";
    if (!path.empty()) text += path + ": ";
    throw Error(text + message);
  }

  static std::string join_path(const std::string& parent, const std::string& key) {
    return parent.empty() ? key : parent + "." + key;
  }

  void require_object(const json& j, const std::string& path) const {
    if (!j.is_object()) fail(path, "expected an object, got " + describe(j));
  }

  // Unknown keys are errors; `noun` is "key" or "flag".
  void check_keys(const json& j, const std::string& path, const std::vector<std::string>& allowed,
                  const std::string& noun = "key") const {
    for (const auto& item : j.items()) {
      if (!contains(allowed, item.key())) {
        fail(path, "unknown " + noun + " '" + item.key() + "'" + suggestion(item.key(), allowed) +
                       "; expected one of: " + join(allowed));
      }
    }
  }

  const json& require_key(const json& j, const std::string& path, const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end()) fail(path, "missing key '" + key + "'");
    return *it;
  }

  std::string get_string(const json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string, got " + describe(j));
    return j.get<std::string>();
  }

  std::string get_choice(const json& j, const std::string& path, const std::vector<std::string>& valid) const {
    std::string value = get_string(j, path);
    if (!contains(valid, value)) {
      fail(path, "'" + value + "' is not one of: " + join(valid) + suggestion(value, valid));
    }
    return value;
  }

  bool get_bool(const json& j, const std::string& path) const {
    if (!j.is_boolean()) fail(path, "expected true or false, got " + describe(j));
    return j.get<bool>();
  }

  int64_t get_int(const json& j, const std::string& path) const {
    if (!j.is_number_integer()) fail(path, "expected an integer, got " + describe(j));
    if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(path, j.dump() + " is too large");
    }
    return j.get<int64_t>();
  }

  int64_t get_int_in(const json& j, const std::string& path, int64_t lo, int64_t hi) const {
    int64_t v = get_int(j, path);
    if (v < lo || v > hi) {
      fail(path, std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                     (hi == std::numeric_limits<int64_t>::max() ? std::string("inf") : std::to_string(hi)) + "]");
    }
    return v;
  }

  double get_number(const json& j, const std::string& path) const {
    if (!j.is_number()) fail(path, "expected a number, got " + describe(j));
    double v = j.get<double>();
    if (!std::isfinite(v)) fail(path, "expected a finite number");
    return v;
  }

  static std::string describe(const json& j) {
    std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return std::string(j.type_name()) + " " + text;
  }

 private:
  std::string label_;
};

// The flag names a manifest may use at the top of "flags": the settings, the techniques' top-level flags
// and their groups (all from the registry), and redteam.
std::vector<std::string> top_level_flag_names() {
  std::vector<std::string> names;
  for (const auto& s : tech::settings()) names.push_back(s.key);
  for (const auto& t : tech::all()) {
    if (!t.group.empty())
      names.push_back(t.group);
    else
      for (const auto& f : t.flags) names.push_back(f.key);
  }
  return names;
}

// Validates one flag value against its registry entry and applies it.
void apply_flag(const Checker& c, const tech::FlagSpec& f, const json& v, const std::string& path,
                runtime::RuntimeOptions& o) {
  if (auto problem = f.validate(v)) c.fail(path + problem->where, problem->message);
  f.set(o, v);
}

// The red-team switches of a flags object ("redteam": {<switch>: true}), refused unless allowed.
redteam::RedTeamOptions parse_redteam(const Checker& c, const json& flags, bool allowed) {
  redteam::RedTeamOptions o;
  if (!flags.is_object() || !flags.contains("redteam")) return o;
  if (!allowed) c.fail("flags.redteam", kRedTeamRefused);
  const json& r = flags["redteam"];
  c.require_object(r, "flags.redteam");
  c.check_keys(r, "flags.redteam", redteam_keys());
  for (const auto& s : redteam::switches())
    if (r.contains(s.key)) o.*(s.field) = c.get_bool(r[s.key], std::string("flags.redteam.") + s.key);
  return o;
}

// Validates a flags object (without red-team switches: Manifest::redteam carries those) against the
// technique registry and applies it on top of the defaults.
runtime::RuntimeOptions resolve_flags(const Checker& c, const json& flags) {
  runtime::RuntimeOptions o;
  c.require_object(flags, "flags");
  if (flags.contains("redteam")) c.fail("flags.redteam", kRedTeamRefused);
  c.check_keys(flags, "flags", top_level_flag_names(), "flag");

  for (const auto& s : tech::settings())
    if (flags.contains(s.key)) apply_flag(c, s, flags[s.key], "flags." + s.key, o);
  std::map<std::string, std::string> exclusive;  // exclusive group -> the technique on in it
  for (const auto& t : tech::all()) {
    if (t.group.empty()) {
      for (const auto& f : t.flags)
        if (flags.contains(f.key)) apply_flag(c, f, flags[f.key], "flags." + f.key, o);
    } else if (flags.contains(t.group)) {
      const std::string path = "flags." + t.group;
      const json& g = flags[t.group];
      c.require_object(g, path);
      std::vector<std::string> keys;
      for (const auto& f : t.flags) keys.push_back(f.key);
      c.check_keys(g, path, keys);
      for (const auto& f : t.flags)
        if (g.contains(f.key)) apply_flag(c, f, g[f.key], path + "." + f.key, o);
    }
    if (t.check_flags)
      if (auto problem = t.check_flags(o))
        c.fail("flags." + (t.group.empty() ? t.name : t.group) + problem->where, problem->message);
    if (!t.exclusive_group.empty() && t.on(o)) {
      auto [it, fresh] = exclusive.emplace(t.exclusive_group, t.name);
      if (!fresh)
        c.fail("flags", it->second + " and " + t.name + " cannot both be on (one " + t.exclusive_group +
                            " technique at a time)");
    }
  }
  return o;
}

// The config of a manifest for `model`: sizes multiples of the model's pixel multiple, guidance_2 only for
// a model with two experts (and required there).
RunConfig parse_config(const Checker& c, const json& j, const models::ModelFacts& model) {
  c.require_object(j, "config");
  c.check_keys(j, "config", kConfigKeys);
  auto key = [&](const std::string& k) -> const json& { return c.require_key(j, "config", k); };
  RunConfig cfg;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (auto [name, field] : {std::pair<const char*, int64_t*>{"height", &cfg.height}, {"width", &cfg.width}}) {
    const std::string path = std::string("config.") + name;
    const int64_t multiple = model.pixel_multiple;
    *field = c.get_int_in(key(name), path, multiple, 16384);
    if (*field % multiple != 0)
      c.fail(path,
             std::to_string(*field) + " is not a multiple of " + std::to_string(multiple) + " (" + model.name + ")");
  }
  cfg.frames = c.get_int_in(key("frames"), "config.frames", 1, 100001);
  if (cfg.frames % 4 != 1) c.fail("config.frames", std::to_string(cfg.frames) + " is not 4k+1");
  cfg.fps = c.get_number(key("fps"), "config.fps");
  if (!(cfg.fps >= 0.001))
    c.fail("config.fps", key("fps").dump() + " must be at least 0.001 (a video's rate is a ratio over 1000)");
  if (cfg.fps > 1000) c.fail("config.fps", key("fps").dump() + " is out of range (0, 1000]");
  cfg.steps = c.get_int_in(key("steps"), "config.steps", 1, 1000);
  cfg.guidance = c.get_number(key("guidance"), "config.guidance");
  if (!(cfg.guidance >= 0 && cfg.guidance <= 50)) {
    c.fail("config.guidance", key("guidance").dump() + " is out of range [0, 50]");
  }
  cfg.seed = c.get_int_in(key("seed"), "config.seed", 0, kMax);
  cfg.flow_shift = c.get_number(key("flow_shift"), "config.flow_shift");
  if (!(cfg.flow_shift > 0)) c.fail("config.flow_shift", key("flow_shift").dump() + " must be > 0");
  const bool two_experts = model.pipeline.boundary_ratio.has_value();
  if (j.contains("guidance_2") && !two_experts)
    c.fail("config.guidance_2", "is only for a model with two experts; " + model.name + " has one");
  if (two_experts) {
    cfg.guidance_2 = c.get_number(key("guidance_2"), "config.guidance_2");
    if (!(*cfg.guidance_2 >= 0 && *cfg.guidance_2 <= 50))
      c.fail("config.guidance_2", key("guidance_2").dump() + " is out of range [0, 50]");
  }
  return cfg;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open manifest");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

bool RunConfig::operator==(const RunConfig& o) const {
  return height == o.height && width == o.width && frames == o.frames && fps == o.fps && steps == o.steps &&
         guidance == o.guidance && seed == o.seed && flow_shift == o.flow_shift && guidance_2 == o.guidance_2;
}

namespace {

// The switches a manifest sets belong to the family it names (issue 38: a control with EasyCache's flag and a
// "kernel" patch made of EasyCache were accepted). A control sets none: it changes precision or threads. A
// patch of family F sets at least one switch of F and, besides, only kernel switches (the lossless layer
// the other families build on, as quant-fp8-hopper does); "composite" mixes any.
void check_family(Checker& c, const Manifest& m) {
  const runtime::RuntimeOptions o = to_runtime_options(m);
  const std::vector<std::string> set_flags = tech::technique_flags_set(o);
  std::vector<std::string> foreign;
  bool own = false;
  for (const auto& t : tech::all()) {
    bool set = false;
    for (const auto& f : t.flags) set = set || f.get(o) != f.default_value();
    if (!set) continue;
    own = own || t.family == m.family;
    if (t.family != m.family && t.family != "kernel") foreign.push_back(t.name + " (" + t.family + ")");
  }
  if (m.kind == "control" && !set_flags.empty())
    c.fail("flags", "a control changes precision or threads only, but sets technique flags: " + join(set_flags) +
                        " (make it a patch of their family)");
  if (m.kind == "patch" && set_flags.empty())
    c.fail("flags",
           "a patch turns on at least one technique; this one sets none (the baseline, or a control of precision or "
           "threads)");
  if (m.kind != "patch" || m.family == "composite" || m.family == "none") return;
  if (!foreign.empty())
    c.fail("family",
           "'" + m.family + "', but the flags set " + join(foreign) + ": name their family, or 'composite' for a mix");
  if (!own && !set_flags.empty())
    c.fail("family", "'" + m.family + "', but no " + m.family + " technique is set (" + join(set_flags) + ")");
}

// The plugin a manifest pins is loaded in this process (its flags are unknown otherwise).
void check_plugin_loaded(Checker& c, const std::string& plugin) {
  const bool loaded =
      std::any_of(tech::all().begin(), tech::all().end(), [&](const tech::Technique& t) { return t.plugin == plugin; });
  if (!loaded) c.fail("plugin", plugin + " is not loaded in this process (autooptim ... --plugin FILE.so)");
}

// Every plugin technique a manifest turns on comes from the plugin it pins: a manifest names the code it runs.
void check_plugin(Checker& c, const Manifest& m) {
  const runtime::RuntimeOptions o = to_runtime_options(m);
  for (const auto& t : tech::all())
    if (!t.plugin.empty() && t.on(o) && t.plugin != m.plugin)
      c.fail("plugin", "'" + t.name + "' comes from plugin " + t.plugin +
                           ", which the manifest must pin (\"plugin\": \"" + t.plugin + "\")");
}

}  // namespace

Manifest parse_manifest(const json& j, const std::string& source_label, const ParseOptions& options) {
  Checker c(source_label);
  c.require_object(j, "");
  c.check_keys(j, "", kTopKeys);
  for (const auto& k : kTopKeys) {
    if (!contains(kOptionalTopKeys, k)) c.require_key(j, "", k);
  }

  Manifest m;
  m.id = c.get_string(j["id"], "id");
  if (!valid_id(m.id)) c.fail("id", "'" + m.id + "' must match [a-z0-9._/-]+ with no empty, '.' or '..' segment");
  m.kind = c.get_choice(j["kind"], "kind", kKinds);
  m.family = c.get_choice(j["family"], "family", kFamilies);
  m.model = c.get_choice(j["model"], "model", kModels);
  m.runtime = c.get_string(j["runtime"], "runtime");
  if (m.runtime.empty()) c.fail("runtime", "must not be empty");
  if (!j["base"].is_null()) {
    m.base = c.get_string(j["base"], "base");
    if (!valid_id(*m.base))
      c.fail("base", "'" + *m.base + "' must match [a-z0-9._/-]+ with no empty, '.' or '..' segment");
    if (*m.base == m.id) c.fail("base", "a manifest cannot be its own base");
  }
  if (j.contains("plugin")) {  // before the flags: a plugin's flags are unknown until it is loaded
    m.plugin = c.get_string(j["plugin"], "plugin");
    if (m.plugin.size() != 64 || m.plugin.find_first_not_of("0123456789abcdef") != std::string::npos)
      c.fail("plugin", "'" + m.plugin + "' is not a sha256 (64 lowercase hex digits)");
    check_plugin_loaded(c, m.plugin);
  }
  m.redteam = parse_redteam(c, j["flags"], options.allow_redteam);
  m.flags = j["flags"];
  if (m.flags.is_object()) m.flags.erase("redteam");
  resolve_flags(c, m.flags);  // validates; the resolved form is recomputed on demand
  m.lossless = c.get_bool(j["lossless"], "lossless");
  m.config = parse_config(c, j["config"], models::model_facts(m.model));
  if (j.contains("description")) m.description = c.get_string(j["description"], "description");
  if (j.contains("parents")) {
    const json& parents = j["parents"];
    if (!parents.is_array()) c.fail("parents", "expected an array of ids, got " + Checker::describe(parents));
    for (size_t i = 0; i < parents.size(); ++i) {
      const std::string path = "parents[" + std::to_string(i) + "]";
      std::string parent = c.get_string(parents[i], path);
      if (!valid_id(parent))
        c.fail(path, "'" + parent + "' must match [a-z0-9._/-]+ with no empty, '.' or '..' segment");
      m.parents.push_back(parent);
    }
  }

  // Cross-field rules: every speedup names its denominator, and a baseline is the plain runtime.
  if (m.kind == "baseline") {
    if (m.base) c.fail("base", "must be null for a baseline (it is its own denominator)");
    if (!technique_flags_set(m).empty()) {
      c.fail("flags", "a baseline sets no technique flags, but sets: " + join(technique_flags_set(m)));
    }
  } else if (!m.base) {
    c.fail("base", "is null, but only a baseline may have no base (kind is '" + m.kind + "')");
  }
  if (m.kind == "patch" && m.family == "none") c.fail("family", "a patch must name its technique family");
  check_plugin(c, m);
  check_family(c, m);
  return m;
}

Manifest load_manifest(const std::string& path, const ParseOptions& options) {
  const std::string text = read_file(path);
  // nlohmann keeps the last of duplicated keys silently; a manifest must not say two things at once.
  // It also takes a NUL byte for the end of the text, and a value nested 100,000 levels deep would
  // overflow the stack in a later recursive copy or dump: both are refused here.
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    throw Error(path + ": invalid JSON: NUL byte at offset " + std::to_string(nul));
  std::vector<std::set<std::string>> open_objects;
  std::vector<std::string> open_keys;  // the key path of the open containers
  std::string duplicate;
  json::parser_callback_t detect_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      if (depth + 1 > runtime::kMaxJsonDepth)
        throw Error(path + ": nesting deeper than " + std::to_string(runtime::kMaxJsonDepth) + " levels at " +
                    runtime::detail::json_key_path(open_keys));
      open_keys.emplace_back();
      if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end || event == json::parse_event_t::array_end) {
      if (!open_keys.empty()) open_keys.pop_back();
      if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_keys.empty()) open_keys.back() = key;
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, detect_duplicates);
  } catch (const json::exception& e) {  // a syntax error, or a number out of range (1E444)
    throw Error(path + ": invalid JSON: " + e.what());
  }
  if (!duplicate.empty()) throw Error(path + ": duplicated key '" + duplicate + "'");
  return parse_manifest(j, path, options);
}

json to_json(const RunConfig& c) {
  json j{{"height", c.height}, {"width", c.width},       {"frames", c.frames}, {"fps", c.fps},
         {"steps", c.steps},   {"guidance", c.guidance}, {"seed", c.seed},     {"flow_shift", c.flow_shift}};
  if (c.guidance_2) j["guidance_2"] = *c.guidance_2;  // two-expert models only: others' hashes are unchanged
  return j;
}

json flags_to_json(const runtime::RuntimeOptions& o) { return tech::flags_to_json(o); }

json flags_to_json(const runtime::RuntimeOptions& o, const redteam::RedTeamOptions& r) {
  json j = flags_to_json(o);
  // Present only when set, so ordinary manifests' canonical form (and hash) does not mention them.
  if (redteam::any_on(r)) {
    json switches = json::object();
    for (const auto& s : redteam::switches()) switches[s.key] = r.*(s.field);
    j["redteam"] = switches;
  }
  return j;
}

json to_json(const Manifest& m) {
  // nlohmann::json keeps object keys sorted, which is the canonical order.
  json j{{"id", m.id},
         {"kind", m.kind},
         {"family", m.family},
         {"model", m.model},
         {"runtime", m.runtime},
         {"base", m.base ? json(*m.base) : json(nullptr)},
         {"flags", flags_to_json(to_runtime_options(m), m.redteam)},
         {"lossless", m.lossless},
         {"config", to_json(m.config)}};
  if (!m.description.empty()) j["description"] = m.description;
  if (!m.parents.empty()) j["parents"] = m.parents;
  if (!m.plugin.empty()) j["plugin"] = m.plugin;
  return j;
}

std::string manifest_hash(const Manifest& m) {
  // What runs: model, configuration, flags, base and the lossless claim. Names, provenance and labels
  // (id, description, parents, kind, family, runtime) do not change a run, so a retry that changes only them
  // is the same candidate (issue 38).
  json j = to_json(m);
  for (const char* label : {"id", "description", "parents", "kind", "family", "runtime"}) j.erase(label);
  return sha256_hex(j.dump());
}

runtime::RuntimeOptions to_runtime_options(const Manifest& m) { return resolve_flags(Checker(m.id), m.flags); }

RunConfig with_sizes(RunConfig c, int64_t frames, int64_t steps, int64_t height, int64_t width) {
  if (frames) c.frames = frames;
  if (steps) c.steps = steps;
  if (height) c.height = height;
  if (width) c.width = width;
  return c;
}

RunConfig official_config(const std::string& model) {
  const models::ModelFacts* facts = models::find_model(model);
  if (!facts) throw Error("unknown model '" + model + "'; expected one of: " + join(kModels));
  const models::OfficialRun& o = facts->official;
  RunConfig c;
  c.height = o.height;
  c.width = o.width;
  c.frames = o.frames;
  c.fps = o.fps;
  c.steps = o.steps;
  c.guidance = o.guidance;
  c.seed = o.seed;
  c.flow_shift = o.flow_shift;
  c.guidance_2 = o.guidance_2;
  return c;
}

std::vector<std::string> technique_flags_set(const Manifest& m) {
  return tech::technique_flags_set(to_runtime_options(m));
}

Manifest with_flags_off(const Manifest& m) {
  Manifest off = m;
  off.id = m.id + ".off";
  off.kind = "control";
  off.family = "none";
  off.base = m.base ? m.base : std::optional<std::string>(m.id);
  off.lossless = true;
  off.flags = json::object();
  for (const auto& s : tech::settings())
    if (m.flags.contains(s.key)) off.flags[s.key] = m.flags[s.key];
  // off.redteam stays the original's: red-team switches are no technique and stay on in the off run.
  off.description = "'" + m.id + "' with its technique flags off";
  off.parents = {m.id};
  return off;
}

}  // namespace autooptim::gates
