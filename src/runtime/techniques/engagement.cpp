#include "runtime/techniques/engagement.h"

#include "runtime/techniques/registry.h"

namespace autooptim::runtime {
namespace {

// "<flag>" in `text` replaced by the value of that flag of `t` in `o`.
std::string substitute(std::string text, const techniques::Technique& t, const RuntimeOptions& o) {
  for (const auto& f : t.flags) {
    const std::string mark = "<" + t.path_of(f) + ">";
    const nlohmann::json v = f.get(o);
    const std::string value = v.is_string() ? v.get<std::string>() : v.dump();
    for (size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at + value.size()))
      text.replace(at, mark.size(), value);
  }
  return text;
}

}  // namespace

std::vector<std::string> engagement_problems(const RuntimeOptions& o, const Trace& t) {
  std::vector<std::string> out;
  const auto idle = techniques::superseded(o);
  for (const auto& tech : techniques::all()) {
    if (!tech.on(o)) continue;
    std::string why;
    for (const auto& [name, by] : idle)
      if (name == tech.name) why = "; " + by + " is on and does its work: leave " + tech.name + " out";
    for (const auto& e : tech.engagement) {
      const std::string key = substitute(e.counter, tech, o);
      if (t.get(key) <= 0) out.push_back(substitute(e.not_engaged, tech, o) + " (" + key + " = 0)" + why);
    }
    if (tech.check_counters) tech.check_counters(o, t, out);
  }
  return out;
}

}  // namespace autooptim::runtime
