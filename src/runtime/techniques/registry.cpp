#include "runtime/techniques/registry.h"
#include "base/strings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <stdexcept>

#include "base/edit_distance.h"
#include "base/error.h"

namespace autooptim::runtime::techniques {

// One declaration per technique file, found by src/runtime/CMakeLists.txt.
#define AUTOOPTIM_REGISTERED(name) Technique autooptim_technique_##name();
#include "techniques_list.inc"
#undef AUTOOPTIM_REGISTERED

namespace {

using nlohmann::json;

using base::join;

std::string int_text(int64_t v) {
  return v == std::numeric_limits<int64_t>::max() ? std::string("inf") : std::to_string(v);
}

using runtime::edit_distance;

std::optional<FlagProblem> check_int(const json& v, int64_t lo, int64_t hi, const std::string& where) {
  if (!v.is_number_integer()) return FlagProblem{where, "expected an integer, got " + describe(v)};
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return FlagProblem{where, v.dump() + " is too large"};
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi)
    return FlagProblem{where,
                       std::to_string(i) + " is out of range [" + std::to_string(lo) + ", " + int_text(hi) + "]"};
  return std::nullopt;
}

std::optional<FlagProblem> check_number(const json& v, const FlagSpec& f, const std::string& where) {
  if (!v.is_number()) return FlagProblem{where, "expected a number, got " + describe(v)};
  const double d = v.get<double>();
  if (!std::isfinite(d)) return FlagProblem{where, "expected a finite number"};
  const bool low = f.min_open ? !(d > f.min) : !(d >= f.min);
  const bool high = f.max_open ? !(d < f.max) : !(d <= f.max);
  if (low || high) {
    auto bound = [](double b) {
      if (std::isinf(b)) return std::string(b > 0 ? "inf" : "-inf");
      char text[32];
      std::snprintf(text, sizeof text, "%g", b);
      return std::string(text);
    };
    return FlagProblem{where, v.dump() + " is out of range " + (f.min_open ? "(" : "[") + bound(f.min) + ", " +
                                  bound(f.max) + (f.max_open ? ")" : "]")};
  }
  return std::nullopt;
}

// A technique's own declaration: a family, flags and its switch flag; its group and top-level flags not taken by
// one in `taken` (the settings' and earlier techniques' names, to which they are added). Empty when sound.
std::string declaration_problem(const Technique& t, std::set<std::string>& taken) {
  const bool ok_family = !t.family.empty() && t.family != "none" && t.family != "composite";
  const std::string prefix = t.group.empty() ? "" : t.group + ".";
  const bool ok_switch = t.switch_flag.rfind(prefix, 0) == 0 && t.flag(t.switch_flag.substr(prefix.size()));
  if (t.name.empty() || !ok_family || t.flags.empty() || !ok_switch)
    return "'" + t.name + "' needs a name, a family, flags and its switch flag";
  if (!t.group.empty() && !taken.insert(t.group).second) return "flag group '" + t.group + "' declared twice";
  for (const auto& f : t.flags)
    if (t.group.empty() && !taken.insert(f.key).second) return "flag '" + f.key + "' declared twice";
  return "";
}

// The list of registered techniques, sorted by family then name; names and flag paths checked unique.
std::deque<Technique> build() {
  std::deque<Technique> out;
#define AUTOOPTIM_REGISTERED(name) out.push_back(autooptim_technique_##name());
#include "techniques_list.inc"
#undef AUTOOPTIM_REGISTERED
  std::sort(out.begin(), out.end(), [](const Technique& a, const Technique& b) {
    return a.family != b.family ? a.family < b.family : a.name < b.name;
  });
  std::set<std::string> top;
  for (const auto& s : settings()) top.insert(s.key);
  for (const auto& t : out)
    if (const std::string problem = declaration_problem(t, top); !problem.empty())
      throw std::logic_error("technique registry: " + problem);
  for (const auto& t : out)
    for (const auto& s : t.supersedes)
      if (s == t.name || std::none_of(out.begin(), out.end(), [&s](const Technique& u) { return u.name == s; }))
        throw std::logic_error("technique registry: '" + t.name + "' supersedes '" + s +
                               "', which is not another technique");
  return out;
}

std::deque<Technique>& registry() {
  static std::deque<Technique> techniques = build();
  return techniques;
}

}  // namespace

std::string did_you_mean(const std::string& name, const std::vector<std::string>& valid) {
  std::string best;
  size_t best_distance = 3;  // more than two edits away is not a typo
  for (const auto& v : valid) {
    const size_t d = edit_distance(name, v);
    if (d < best_distance) best_distance = d, best = v;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

const char* to_string(FlagType t) {
  switch (t) {
    case FlagType::kBool:
      return "bool";
    case FlagType::kInt:
      return "int";
    case FlagType::kNumber:
      return "number";
    case FlagType::kChoice:
      return "choice";
    case FlagType::kIntList:
      return "int_list";
    case FlagType::kNumberList:
      return "number_list";
  }
  return "?";
}

std::string describe(const json& j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(j.type_name()) + " " + text;
}

std::optional<FlagProblem> FlagSpec::validate(const json& v) const {
  switch (type) {
    case FlagType::kBool:
      if (!v.is_boolean()) return FlagProblem{"", "expected true or false, got " + describe(v)};
      return std::nullopt;
    case FlagType::kInt:
      return check_int(v, int_min, int_max, "");
    case FlagType::kNumber:
      return check_number(v, *this, "");
    case FlagType::kChoice: {
      if (!v.is_string()) return FlagProblem{"", "expected a string, got " + describe(v)};
      const std::string s = v.get<std::string>();
      if (std::find(choices.begin(), choices.end(), s) == choices.end())
        return FlagProblem{"", "'" + s + "' is not one of: " + join(choices) + did_you_mean(s, choices)};
      return std::nullopt;
    }
    case FlagType::kIntList:
    case FlagType::kNumberList: {
      if (!v.is_array()) return FlagProblem{"", "expected an array, got " + describe(v)};
      if (v.size() > max_items)
        return FlagProblem{"", "has " + std::to_string(v.size()) + " items, at most " + std::to_string(max_items)};
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string where = "[" + std::to_string(i) + "]";
        auto p =
            type == FlagType::kIntList ? check_int(v[i], int_min, int_max, where) : check_number(v[i], *this, where);
        if (p) return p;
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

json FlagSpec::to_json() const {
  json j{{"type", techniques::to_string(type)}, {"default", default_value()}, {"help", help}};
  if (type == FlagType::kInt || type == FlagType::kIntList)
    j["range"] = {int_min, int_max == std::numeric_limits<int64_t>::max() ? json("inf") : json(int_max)};
  if (type == FlagType::kNumber || type == FlagType::kNumberList) {
    auto b = [](double x) { return std::isinf(x) ? json(x > 0 ? "inf" : "-inf") : json(x); };
    j["range"] = {b(min), b(max)};
    j["range_open"] = {min_open, max_open};
  }
  if (type == FlagType::kChoice) j["choices"] = choices;
  if (type == FlagType::kIntList || type == FlagType::kNumberList) j["max_items"] = max_items;
  return j;
}

FlagSpec bool_flag(std::string key, Field<bool> bound, std::string help) {
  FlagSpec f;
  f.key = std::move(key);
  f.type = FlagType::kBool;
  f.help = std::move(help);
  f.get = [get = bound.get](const RuntimeOptions& o) { return json(get(o)); };
  f.set = [edit = bound.edit](RuntimeOptions& o, const json& v) { edit(o) = v.get<bool>(); };
  return f;
}

FlagSpec int_flag(std::string key, Field<int64_t> bound, int64_t lo, int64_t hi, std::string help) {
  FlagSpec f;
  f.key = std::move(key);
  f.type = FlagType::kInt;
  f.help = std::move(help);
  f.int_min = lo;
  f.int_max = hi;
  f.get = [get = bound.get](const RuntimeOptions& o) { return json(get(o)); };
  f.set = [edit = bound.edit](RuntimeOptions& o, const json& v) { edit(o) = v.get<int64_t>(); };
  return f;
}

FlagSpec number_flag(std::string key, Field<double> bound, double lo, bool lo_open, double hi, bool hi_open,
                     std::string help) {
  FlagSpec f;
  f.key = std::move(key);
  f.type = FlagType::kNumber;
  f.help = std::move(help);
  f.min = lo;
  f.min_open = lo_open;
  f.max = hi;
  f.max_open = hi_open;
  f.get = [get = bound.get](const RuntimeOptions& o) { return json(get(o)); };
  f.set = [edit = bound.edit](RuntimeOptions& o, const json& v) { edit(o) = v.get<double>(); };
  return f;
}

FlagSpec choice_flag(std::string key, Field<std::string> bound, std::vector<std::string> choices, std::string help) {
  FlagSpec f;
  f.key = std::move(key);
  f.type = FlagType::kChoice;
  f.help = std::move(help);
  f.choices = std::move(choices);
  f.get = [get = bound.get](const RuntimeOptions& o) { return json(get(o)); };
  f.set = [edit = bound.edit](RuntimeOptions& o, const json& v) { edit(o) = v.get<std::string>(); };
  return f;
}

FlagSpec int_list_flag(std::string key, Field<std::vector<int64_t>> bound, int64_t lo, int64_t hi, size_t max_items,
                       std::string help) {
  FlagSpec f;
  f.key = std::move(key);
  f.type = FlagType::kIntList;
  f.help = std::move(help);
  f.int_min = lo;
  f.int_max = hi;
  f.max_items = max_items;
  f.get = [get = bound.get](const RuntimeOptions& o) { return json(get(o)); };
  f.set = [edit = bound.edit](RuntimeOptions& o, const json& v) { edit(o) = v.get<std::vector<int64_t>>(); };
  return f;
}

FlagSpec number_list_flag(std::string key, Field<std::vector<double>> bound, double lo, double hi, size_t max_items,
                          std::string help) {
  FlagSpec f;
  f.key = std::move(key);
  f.type = FlagType::kNumberList;
  f.help = std::move(help);
  f.min = lo;
  f.max = hi;
  f.max_items = max_items;
  f.get = [get = bound.get](const RuntimeOptions& o) { return json(get(o)); };
  f.set = [edit = bound.edit](RuntimeOptions& o, const json& v) { edit(o) = v.get<std::vector<double>>(); };
  return f;
}

std::vector<FlagSpec> always_written(std::vector<FlagSpec> flags) {
  for (auto& f : flags) f.always_written = true;
  return flags;
}

const FlagSpec* Technique::flag(const std::string& key) const {
  for (const auto& f : flags)
    if (f.key == key) return &f;
  return nullptr;
}

bool Technique::on(const RuntimeOptions& o) const {
  const FlagSpec* f =
      flag(group.empty() ? switch_flag : switch_flag.substr(std::min(switch_flag.size(), group.size() + 1)));
  return f && f->get(o) != f->default_value();
}

json Technique::to_json(const SearchContext& reference) const {
  json fl = json::object();
  for (const auto& f : flags) fl[path_of(f)] = f.to_json();
  json eng = json::array();
  for (const auto& e : engagement) eng.push_back({{"counter", e.counter}, {"not_engaged", e.not_engaged}});
  json space = json::array();
  if (search)
    for (const auto& p : search(reference)) space.push_back({{"label", p.label}, {"flags", p.flags}});
  json j = {{"name", name},
            {"family", family},
            {"lossless", lossless},
            {"summary", summary},
            {"flags", fl},
            {"switch", switch_flag},
            {"exclusive_group", exclusive_group},
            {"hooks", hooks},
            {"supersedes", supersedes},
            {"engagement", eng},
            {"search_space", space},
            {"calibration", calibration ? calibration->flags : json(nullptr)}};
  if (!plugin.empty()) j["plugin"] = plugin;
  return j;
}

const std::deque<Technique>& all() { return registry(); }

void add_technique(Technique t) {
  std::deque<Technique>& ts = registry();
  std::set<std::string> top;  // the names the settings and the registered techniques take (all sound)
  for (const auto& s : settings()) top.insert(s.key);
  for (const auto& u : ts) declaration_problem(u, top);
  if (find(t.name)) throw Error("technique '" + t.name + "' is registered already");
  if (const std::string problem = declaration_problem(t, top); !problem.empty()) throw Error("technique " + problem);
  for (const auto& s : t.supersedes)
    if (s == t.name || !find(s))
      throw Error("technique '" + t.name + "' supersedes '" + s + "', which is not another technique");
  ts.push_back(std::move(t));
}

const Technique* find(const std::string& name) {
  for (const auto& t : all())
    if (t.name == name) return &t;
  return nullptr;
}

namespace {
// Whether a technique that is on under `o` has a hook under `prefix` or equal to `stage`.
bool works_on(const RuntimeOptions& o, const std::string& prefix, const std::string& stage) {
  for (const auto& t : all())
    if (t.on(o))
      for (const auto& h : t.hooks)
        if (h.rfind(prefix, 0) == 0 || h == stage) return true;
  return false;
}
}  // namespace

bool works_on_decode(const RuntimeOptions& o) { return works_on(o, "vae.", "pipeline.decode"); }

bool works_on_text_encoding(const RuntimeOptions& o) { return works_on(o, "text_encoder.", "pipeline.encode_text"); }

namespace {
// A setting's field: `member` of RuntimeOptions itself.
template <typename T>
Field<T> setting(T RuntimeOptions::*member) {
  return {[member](const RuntimeOptions& o) -> const T& { return o.*member; },
          [member](RuntimeOptions& o) -> T& { return o.*member; }};
}
}  // namespace

const std::vector<FlagSpec>& settings() {
  static const std::vector<FlagSpec> s = always_written({
      choice_flag("dtype", setting(&RuntimeOptions::dtype), {"bf16", "fp32", "fp64"},
                  "the transformer's compute dtype (the CPU runs bf16 in fp32)"),
      int_flag("cpu_threads", setting(&RuntimeOptions::cpu_threads), 0, 256, "CPU threads; 0 = libtorch's own setting"),
      bool_flag("onednn", setting(&RuntimeOptions::onednn), "oneDNN CPU kernels where libtorch picks them"),
  });
  return s;
}

json flags_to_json(const RuntimeOptions& o) {
  json j = json::object();
  for (const auto& s : settings()) j[s.key] = s.get(o);
  for (const auto& t : all()) {
    json group = json::object();
    bool legacy = false;  // a group that existed before the registry: always written
    for (const auto& f : t.flags) {
      const json v = f.get(o);
      legacy = legacy || f.always_written;
      if (!f.always_written && v == f.default_value()) continue;
      (t.group.empty() ? j : group)[f.key] = v;
    }
    if (t.group.empty() || group.empty()) continue;
    // A newer group is written whole once any of its flags is set, so its canonical form never depends
    // on which keys a manifest spelled out.
    if (!legacy)
      for (const auto& f : t.flags) group[f.key] = f.get(o);
    j[t.group] = group;
  }
  return j;
}

std::vector<std::string> technique_flags_set(const RuntimeOptions& o) {
  std::vector<std::string> names;
  for (const auto& t : all())
    for (const auto& f : t.flags)
      if (f.get(o) != f.default_value()) names.push_back(t.path_of(f));
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> techniques_on(const RuntimeOptions& o) {
  std::vector<std::string> names;
  for (const auto& t : all())
    if (t.on(o)) names.push_back(t.name);
  return names;
}

std::vector<std::pair<std::string, std::string>> superseded(const RuntimeOptions& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& idle : all()) {
    if (!idle.on(o)) continue;
    for (const auto& t : all())
      if (t.on(o) && std::find(t.supersedes.begin(), t.supersedes.end(), idle.name) != t.supersedes.end()) {
        out.push_back({idle.name, t.name});
        break;
      }
  }
  return out;
}

json registry_to_json(const SearchContext& reference) {
  json techniques = json::array();
  for (const auto& t : all()) techniques.push_back(t.to_json(reference));
  json s = json::object();
  for (const auto& f : settings()) s[f.key] = f.to_json();
  return {{"techniques", techniques},
          {"settings", s},
          {"search_context", {{"steps", reference.steps}, {"gpu", reference.gpu}}}};
}

}  // namespace autooptim::runtime::techniques
