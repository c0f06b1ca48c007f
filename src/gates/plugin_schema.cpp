#include "gates/plugin_schema.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "base/error.h"
#include "runtime/techniques/registry.h"

namespace autooptim::gates {

namespace tech = runtime::techniques;
using nlohmann::json;

namespace {

// The values of described techniques' flags, by path: what an options struct holds for a built-in.
struct DescribedFlagValues {
  std::map<std::string, json> values;
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& registered_plugins() {
  static std::set<std::string> s;
  return s;
}
std::set<std::string>& schema_names() {
  static std::set<std::string> s;
  return s;
}

tech::FlagType flag_type(const std::string& t) {
  for (auto f : {tech::FlagType::kBool, tech::FlagType::kInt, tech::FlagType::kNumber, tech::FlagType::kChoice,
                 tech::FlagType::kIntList, tech::FlagType::kNumberList})
    if (t == tech::to_string(f)) return f;
  throw Error("unknown flag type '" + t + "'");
}

double bound(const json& b) {
  if (b.is_string()) {
    const std::string s = b.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    throw Error("a bound '" + s + "' that is not a number");
  }
  return b.get<double>();
}

tech::FlagSpec described_flag(const std::string& path, const std::string& key, const json& j) {
  tech::FlagSpec f;
  f.key = key;
  f.type = flag_type(j.at("type").get<std::string>());
  f.help = j.value("help", std::string());
  if (f.type == tech::FlagType::kInt || f.type == tech::FlagType::kIntList) {
    f.int_min = j.at("range").at(0).get<int64_t>();
    f.int_max =
        j.at("range").at(1).is_string() ? std::numeric_limits<int64_t>::max() : j.at("range").at(1).get<int64_t>();
  }
  if (f.type == tech::FlagType::kNumber || f.type == tech::FlagType::kNumberList) {
    f.min = bound(j.at("range").at(0));
    f.max = bound(j.at("range").at(1));
    f.min_open = j.at("range_open").at(0).get<bool>();
    f.max_open = j.at("range_open").at(1).get<bool>();
  }
  if (f.type == tech::FlagType::kChoice) f.choices = j.at("choices").get<std::vector<std::string>>();
  if (f.type == tech::FlagType::kIntList || f.type == tech::FlagType::kNumberList)
    f.max_items = j.at("max_items").get<size_t>();
  const json def = j.at("default");
  if (auto problem = f.validate(def)) throw Error("flag '" + path + "': its default " + problem->message);
  f.get = [path, def](const runtime::RuntimeOptions& o) {
    const auto& v = o.of<DescribedFlagValues>().values;
    const auto it = v.find(path);
    return it == v.end() ? def : it->second;
  };
  f.set = [path](runtime::RuntimeOptions& o, const json& v) { o.of<DescribedFlagValues>().values[path] = v; };
  return f;
}

tech::Technique described_technique(const std::string& sha256, const json& j) {
  tech::Technique t;
  t.name = j.at("name").get<std::string>();
  t.family = j.at("family").get<std::string>();
  t.lossless = j.at("lossless").get<bool>();
  t.summary = j.value("summary", std::string());
  t.group = j.at("group").get<std::string>();
  t.switch_flag = j.at("switch").get<std::string>();
  t.exclusive_group = j.value("exclusive_group", std::string());
  t.hooks = j.value("hooks", std::vector<std::string>());
  t.supersedes = j.value("supersedes", std::vector<std::string>());
  for (const auto& e : j.value("engagement", json::array()))
    t.engagement.push_back({e.at("counter").get<std::string>(), e.at("not_engaged").get<std::string>()});
  const std::string prefix = t.group.empty() ? "" : t.group + ".";
  for (const auto& [path, spec] : j.at("flags").items()) {
    if (path.rfind(prefix, 0) != 0) throw Error("flag '" + path + "' is outside its group '" + t.group + "'");
    t.flags.push_back(described_flag(path, path.substr(prefix.size()), spec));
  }
  t.plugin = sha256;
  return t;
}

}  // namespace

void register_plugin_schema(const std::string& sha256, const json& techniques) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (registered_plugins().count(sha256)) return;
  if (!techniques.is_array() || techniques.empty()) throw Error("plugin " + sha256 + " describes no technique");
  std::vector<tech::Technique> ts;
  for (const auto& j : techniques) {
    try {
      ts.push_back(described_technique(sha256, j));
    } catch (const json::exception& e) {
      throw Error("plugin " + sha256 + "'s description of a technique: " + e.what());
    } catch (const Error& e) {
      throw Error("plugin " + sha256 + "'s description of '" + j.value("name", std::string("?")) + "': " + e.what());
    }
  }
  for (auto& t : ts) {
    const std::string name = t.name;
    tech::add_technique(std::move(t));
    schema_names().insert(name);
  }
  registered_plugins().insert(sha256);
}

std::string schema_only_technique_on(const runtime::RuntimeOptions& o) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& name : schema_names())
    if (const tech::Technique* t = tech::find(name); t && t->on(o)) return name;
  return "";
}

bool plugin_known(const std::string& sha256) {
  const auto& all = tech::all();
  return std::any_of(all.begin(), all.end(), [&](const tech::Technique& t) { return t.plugin == sha256; });
}

std::string plugin_turned_on(const Manifest& m) {
  std::string pin;
  for (const auto& name : tech::techniques_on(to_runtime_options(m))) {
    const tech::Technique* t = tech::find(name);
    if (!t || t->plugin.empty() || t->plugin == pin) continue;
    if (!pin.empty())
      throw Error("'" + name + "' comes from plugin " + t->plugin + " and another technique on from plugin " + pin +
                  ": a manifest runs the code of one plugin");
    pin = t->plugin;
  }
  return pin;
}

}  // namespace autooptim::gates
