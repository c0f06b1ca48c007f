// Compositions: the best survivor of each family composed with the others' into a new candidate, which
// is gated again. On a reduced configuration nothing can be accepted (the official-config gate); its
// survivors of every other gate are composed all the same, so the step is exercised and reported.
#include <algorithm>
#include <chrono>
#include <map>

#include "base/error.h"
#include "gates/plugin_schema.h"
#include "orchestrator/phases/phases.h"
#include "runtime/techniques/registry.h"

using nlohmann::json;

namespace autooptim::orchestrator {

json compose_flags(const json& base_flags, const std::vector<json>& parts) {
  json out = json::object();
  for (const auto& flags : parts)
    for (const auto& [k, v] : flags.items()) {
      if (k == "dtype" || k == "cpu_threads") continue;
      if (base_flags.contains(k) && base_flags[k] == v) continue;  // the part leaves it at the baseline's
      if (out.contains(k) && out[k] != v) return json();
      out[k] = v;
    }
  return out;
}

std::optional<gates::Manifest> compose_manifest(const gates::Manifest& base,
                                                const std::vector<const gates::Manifest*>& parts) {
  std::vector<json> part_flags;
  for (const auto* p : parts) part_flags.push_back(p->flags);
  const json flags = compose_flags(gates::to_json(base)["flags"], part_flags);
  if (flags.is_null()) return std::nullopt;
  gates::Manifest m = base;
  m.kind = "patch";
  m.family = "composite";
  m.base = base.id;
  m.flags = flags;
  m.lossless = std::all_of(parts.begin(), parts.end(), [](const gates::Manifest* p) { return p->lossless; });
  std::string id = base.model + "/composite/";
  for (size_t k = 0; k < parts.size(); ++k) {
    m.parents.push_back(parts[k]->id);
    id += (k ? "-plus-" : "") + parts[k]->id.substr(parts[k]->id.rfind('/') + 1);
  }
  m.id = id;
  m.description = "composition of the best accepted candidate of each family";
  // A part's technique that another part's leaves idle (attention_backend under hopper_attention,
  // gelu_epilogue under quant.fp8) would fail the engagement check: the composition leaves it out.
  for (const auto& [name, by] : runtime::techniques::superseded(gates::to_runtime_options(m))) {
    const auto* t = runtime::techniques::find(name);
    for (const auto& f : t->flags) m.flags.erase(t->group.empty() ? f.key : t->group);
    m.description += "; " + name + " left out (" + by + " does its work)";
  }
  m.plugin = gates::plugin_turned_on(m);  // Error when two parts run two plugins: not composed
  return gates::parse_manifest(gates::to_json(m), "composition " + id);
}

std::vector<Candidate> next_compositions(RunState& s) {
  // The best survivor of each family (by speedup), with the families' bests as they stand now.
  std::map<std::string, const Candidate*> best_of;
  for (const auto& c : s.cands)
    if (s.survives(c) && (!best_of.count(c.m.family) || c.speedup() > best_of[c.m.family]->speedup()))
      best_of[c.m.family] = &c;
  std::vector<const Candidate*> fams;
  for (const auto& kv : best_of) fams.push_back(kv.second);
  std::vector<std::vector<const Candidate*>> combos;
  for (size_t i = 0; i < fams.size(); ++i)
    for (size_t j = i + 1; j < fams.size(); ++j) combos.push_back({fams[i], fams[j]});
  if (fams.size() >= 3) combos.push_back(fams);
  std::vector<Candidate> fresh;
  for (const auto& parts : combos) {
    std::vector<const gates::Manifest*> pm;
    for (const auto* c : parts) pm.push_back(&c->m);
    std::optional<gates::Manifest> composite;
    try {
      composite = compose_manifest(s.base, pm);
    } catch (const Error& e) {
      s.progress.warn(std::string("skipping a composition that is not a valid manifest: ") + e.what());
      continue;
    }
    if (!composite) continue;  // the parts set one flag differently
    const std::string hash = gates::manifest_hash(*composite);
    if (!s.seen.insert(hash).second) continue;  // a composition already gated is not gated again
    fresh.push_back({*composite, hash, std::nullopt, std::nullopt});
  }
  return fresh;
}

void compose_round(RunState& s) {
  std::vector<Candidate> fresh = next_compositions(s);
  const auto t0 = Clock::now();
  const int64_t before = s.gate_runs;
  gate_candidates(s, fresh, "compose");
  s.compose_phase.wall_s += std::chrono::duration<double>(Clock::now() - t0).count();
  s.compose_phase.gate_runs += s.gate_runs - before;
  for (auto& c : fresh) s.composed.push_back(std::move(c));
}

}  // namespace autooptim::orchestrator
