#pragma once
// The executors' search decisions that need no model: the cache family's order of measurement and the
// closest miss a family proposes when none of its trials met the quality floor. Internal to the executors
// (and their tests).
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "executors/executor.h"
#include "runtime/techniques/registry.h"

namespace autooptim::executors {

// A search point of a technique and, once measured, its latest trial.
struct Candidate {
  const runtime::techniques::Technique* tech = nullptr;
  std::string label;
  nlohmann::json flags;
  Trial trial;
};

// The cache executor's order of measurement for a family's search space (registry order): each policy's
// points middle first (middle_out), then round robin across the policies, so a short budget tries each.
std::vector<Candidate> cache_order(
    const std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>>& space);

// Called after order[next - 1] was measured (`measured`). An adaptive policy that skipped nothing is likely
// to skip nothing on this model at its other points too, while a fixed-schedule policy always engages: the
// first fixed-schedule candidate in order[next..] moves to order[next], the others keep their order.
// Returns whether one moved.
bool fixed_schedule_next(std::vector<Candidate>& order, size_t next, const Candidate& measured);

// Among `measured` (one entry per search point, its latest trial), the closest miss: of the trials that
// engaged and were faster than 1.0x, the one with the highest psnr_min; null when there is none.
const Candidate* closest_miss(const std::vector<Candidate>& measured);

// The kernel executor's starting set for its search space: every flag of every point, in order. A flag
// competes for a slot: its own key, or, when it is its technique's switch, that technique's exclusive
// group (two ways of computing the VAE's upsamplers). The first flag of each slot is on; a later one of
// a taken slot (another attention backend, another padding) is an alternative, tried after the ablation
// in place of the slot's survivor. A switch that another starting switch supersedes (attention_backend
// under hopper_attention, timestep_dedup under uniform_timestep) is an alternative too: on, it would sit
// idle and fail the engagement check. The lossy switches come first in `on`, the order the ablation
// tries removing them in.
struct KernelSwitches {
  std::vector<std::pair<std::string, nlohmann::json>> on, alternatives;
  std::map<std::string, bool> lossless;     // flag -> whether its technique is bit-exact
  std::map<std::string, std::string> slot;  // flag -> its slot
};
KernelSwitches kernel_switches(
    const std::vector<std::pair<const runtime::techniques::Technique*, runtime::techniques::SearchPoint>>& space);

}  // namespace autooptim::executors
