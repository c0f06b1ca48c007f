// The tiers: per bucket (1.5x, 2x, 3x, 4x) the accepted candidate with the best quality (then speed)
// that also holds the bucket on the held-out prompts; a bucket nobody holds says why.
#include <algorithm>

#include "base/strings.h"
#include "orchestrator/phases/phases.h"
#include "orchestrator/report.h"

using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

std::string num_text(double v) { return base::format_fixed(v, 2); }

json tier_entry(const RunState& s, const Candidate& c) {
  return {{"manifest", c.m.id},
          {"speedup", c.speedup()},
          {"psnr", c.psnr()},
          {"ssim", c.ssim()},
          {"family", c.m.family},
          {"flags", c.m.flags},
          {"heldout_accepted", true},
          {"heldout_speedup", c.heldout ? c.heldout->speedup : 0.0},
          {"heldout_psnr", c.heldout ? c.heldout->psnr : 0.0},
          {"resolved_manifest", gates::to_json(c.m)},
          {"switches", gates::technique_flags_set(c.m)},
          {"lossless", c.m.lossless},
          {"psnr_floor", c.m.lossless ? s.gs.lossless_psnr : s.gs.min_psnr},
          {"prompts", s.split_used},
          {"split_prompts", s.split_all},
          {"heldout_prompts", s.heldout_used},
          {"heldout_split_prompts", s.heldout_all}};
}

// Why nobody holds a bucket that needs `need`: the configuration, the nearest miss, and what the budget
// left ungated. `pool`: the accepted candidates fast enough for it.
void explain_empty_tier(const RunState& s, double need, bool pool_empty, json& notes) {
  if (!s.official) notes.push_back("reduced configuration: the official-config gate rejects every candidate");
  // The nearest miss: a rejected candidate that was fast enough for this bucket (what held it back was
  // not speed); a slower rejected one says nothing about the bucket.
  const Candidate* nearest = nullptr;
  for (const auto& c : s.cands)
    if (c.val && !c.accepted() && c.speedup() >= need && (!nearest || ranks_above(c, *nearest))) nearest = &c;
  if (nearest) {
    std::string failed;
    for (const auto& [g, x] : nearest->val->gates)
      if (!x.pass) failed += (failed.empty() ? "" : ", ") + g;
    notes.push_back("nearest miss: " + nearest->m.id + " at " + num_text(nearest->speedup()) + "x, worst PSNR " +
                    quality_text(nearest->psnr(), true) + ", failed " + failed);
  }
  const Candidate* fastest = nullptr;
  for (const auto& c : s.cands)
    if (c.accepted() && (!fastest || c.speedup() > fastest->speedup())) fastest = &c;
  if (pool_empty)
    notes.push_back(fastest
                        ? "fastest accepted candidate: " + fastest->m.id + " at " + num_text(fastest->speedup()) + "x"
                        : std::string("no candidate was accepted"));
  int ungated = 0, ungated_comp = 0;
  for (const auto& c : s.cands)
    if (!c.val) ++ungated, ungated_comp += c.m.family == "composite";
  if (ungated)
    notes.push_back(std::to_string(ungated) + " candidate(s) never gated" +
                    (ungated_comp ? " (" + std::to_string(ungated_comp) + " compositions)" : "") + ": " +
                    s.not_gated.begin()->second);
}

// The bucket's winner among `pool` (best first), each checked on the held-out split once; notes say why
// one was passed over. Null when none holds.
json choose_winner(RunState& s, const std::vector<Candidate*>& pool, double need, const HeldoutGate& heldout,
                   json& notes) {
  const RunRequest& req = s.req;
  for (auto* c : pool) {
    if (!c->heldout) c->heldout = heldout(*c);
    if (!c->heldout) {
      notes.push_back(c->m.id + " reached " + num_text(c->speedup()) + "x on " + req.split +
                      " but its held-out check was not run: " + s.not_gated[{c->hash, req.heldout_split}]);
      return nullptr;
    }
    if (!c->heldout->accepted || c->heldout->speedup < need) {
      notes.push_back(c->m.id + " reached " + num_text(c->speedup()) + "x on " + req.split +
                      " but not on the held-out prompts (" + num_text(c->heldout->speedup) + "x" +
                      (c->heldout->accepted ? "" : ", rejected: " + c->heldout->failure_signature) + ")");
      continue;
    }
    return tier_entry(s, *c);
  }
  return nullptr;
}

}  // namespace

void choose_tiers(RunState& s, const HeldoutGate& heldout) {
  s.tiers = json::object();
  s.tier_notes = json::object();
  for (const auto& [bucket, need] : tier_buckets()) {
    std::vector<Candidate*> pool;
    for (auto& c : s.cands)
      if (c.accepted() && c.speedup() >= need) pool.push_back(&c);
    std::sort(pool.begin(), pool.end(), [](const Candidate* a, const Candidate* b) { return ranks_above(*a, *b); });
    json notes = json::array();
    s.tiers[bucket] = choose_winner(s, pool, need, heldout, notes);
    if (s.tiers[bucket].is_null()) explain_empty_tier(s, need, pool.empty(), notes);
    s.tier_notes[bucket] = notes;
  }
  s.progress.clear();
}

}  // namespace autooptim::orchestrator
