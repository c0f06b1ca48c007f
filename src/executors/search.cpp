#include "executors/search.h"

#include <algorithm>
#include <iterator>
#include <set>

namespace autooptim::executors {

std::vector<Candidate> cache_order(
    const std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>>& space) {
  std::vector<std::vector<Candidate>> per_technique;
  for (const auto& [tech, point] : space) {
    if (per_technique.empty() || per_technique.back().front().tech != tech) per_technique.emplace_back();
    per_technique.back().push_back({tech, point.label, point.flags, {}});
  }
  for (auto& points : per_technique) {
    std::vector<Candidate> ordered;
    for (size_t i : middle_out(points.size())) ordered.push_back(points[i]);
    points = std::move(ordered);
  }
  std::vector<Candidate> order;
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (const auto& c : per_technique)
      if (k < c.size()) order.push_back(c[k]), any = true;
    if (!any) return order;
  }
}

bool fixed_schedule_next(std::vector<Candidate>& order, size_t next, const Candidate& measured) {
  if (!measured.tech || measured.tech->fixed_schedule || measured.trial.engaged() || next >= order.size()) return false;
  const auto it = std::find_if(order.begin() + static_cast<long>(next), order.end(),
                               [](const Candidate& c) { return c.tech && c.tech->fixed_schedule; });
  if (it == order.end()) return false;
  std::rotate(order.begin() + static_cast<long>(next), it, it + 1);
  return true;
}

const Candidate* closest_miss(const std::vector<Candidate>& measured) {
  const Candidate* best = nullptr;
  for (const auto& c : measured)
    if (c.trial.engaged() && c.trial.speedup > 1.0 && (!best || c.trial.psnr_min > best->trial.psnr_min)) best = &c;
  return best;
}

KernelSwitches kernel_switches(
    const std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>>& space) {
  KernelSwitches k;
  std::map<std::string, const runtime::techniques::Technique*> owner;  // flag -> its technique
  for (const auto& [tech, point] : space)
    for (const auto& [key, value] : point.flags.items()) {
      k.lossless.emplace(key, tech->lossless);
      k.slot.emplace(
          key, key == tech->switch_flag && !tech->exclusive_group.empty() ? "group " + tech->exclusive_group : key);
      const auto same = [&, &key = key, &value = value](const auto& x) { return x.first == key && x.second == value; };
      if (std::any_of(k.on.begin(), k.on.end(), same) ||
          std::any_of(k.alternatives.begin(), k.alternatives.end(), same))
        continue;  // a flag two points share (vae_channels_last under vae_frame_convs): once
      const std::string& slot = k.slot[key];
      const bool taken = std::any_of(k.on.begin(), k.on.end(), [&](const auto& x) { return k.slot[x.first] == slot; });
      (taken ? k.alternatives : k.on).push_back({key, value});
      owner.emplace(key, tech);
    }
  // A switch another starting switch supersedes would sit idle and fail the engagement check: it waits as
  // an alternative (tried if the ablation drops the one that supersedes it: the GPU is no Hopper).
  std::set<std::string> superseded;
  for (const auto& s : k.on) superseded.insert(owner[s.first]->supersedes.begin(), owner[s.first]->supersedes.end());
  const auto idle = std::stable_partition(k.on.begin(), k.on.end(),
                                          [&](const auto& s) { return !superseded.count(owner[s.first]->name); });
  k.alternatives.insert(k.alternatives.end(), std::make_move_iterator(idle), std::make_move_iterator(k.on.end()));
  k.on.erase(idle, k.on.end());
  // The ablation removes switches in this order and may run out of trials: the lossy ones first, since a
  // switch that costs quality has to earn its place (vae_bf16 on a CPU without native bf16 makes the whole
  // set 0.5x, and a budget of five trials never reached it behind the lossless ones).
  std::stable_partition(k.on.begin(), k.on.end(), [&](const auto& s) { return !k.lossless[s.first]; });
  return k;
}

}  // namespace autooptim::executors
