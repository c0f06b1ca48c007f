#pragma once
// A RunState for the phase tests: the tiny model's pinned baseline and the repository's prompts, no
// workers, a run folder of its own. Candidates and verdicts are made in the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "base/remove_tree.h"
#include "orchestrator/phases/phases.h"

namespace autooptim::orchestrator::testing {

// A candidate of `family` with `flags` (resolved as an executor proposes it) and a verdict on the split.
inline Candidate candidate(const gates::Manifest& base, const std::string& family, const std::string& name,
                           const nlohmann::json& flags, const nlohmann::json& verdict) {
  gates::Manifest m = base;
  m.id = base.model + "/" + family + "/" + name;
  m.kind = "patch";
  m.family = family;
  m.base = base.id;
  m.flags = flags;
  m = gates::parse_manifest(gates::to_json(m), "test candidate");
  const std::string hash = gates::manifest_hash(m);
  if (verdict.is_null()) return {m, hash, std::nullopt, std::nullopt};
  nlohmann::json v = verdict;
  v["manifest_hash"] = hash;
  return {m, hash, GateRecord::read(v, "test verdict"), std::nullopt};
}

// A gate verdict as the workers return it: accepted or not, speed, worst PSNR, the gates that failed.
inline nlohmann::json verdict(bool accepted, double speedup, double psnr, const std::string& failed = "",
                              const std::string& hash = "h", const std::string& split = "val") {
  nlohmann::json gates = {{"artifacts", {{"pass", true}}}, {"official_config", {{"pass", true}}}};
  if (!failed.empty()) gates[failed] = {{"pass", false}, {"reason", failed + " failed"}};
  return {
      {"manifest_hash", hash}, {"split", split}, {"accepted", accepted}, {"speedup", speedup},
      {"psnr", psnr},          {"ssim", 0.9},    {"gates", gates},       {"failure_signature", accepted ? "" : failed}};
}
// The same, read as the run keeps it.
inline GateRecord record(bool accepted, double speedup, double psnr, const std::string& failed = "",
                         const std::string& hash = "h", const std::string& split = "val") {
  return GateRecord::read(verdict(accepted, speedup, psnr, failed, hash, split), "test verdict");
}

class RunStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("autooptim-phases-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    req_.load.model = "wan22-tiny";
    req_.out_dir = dir_.string();
    req_.prompts_dir = std::string(AUTOOPTIM_SOURCE_DIR) + "/prompts";
    req_.budget_minutes = 600;
  }
  void TearDown() override {
    std::error_code ec;
    runtime::remove_tree(dir_, ec);
  }
  // The state of a run of req_ (change req_ first), gating prepared as far as it needs no worker.
  RunState& state(gates::Manifest base = gates::pinned_baseline("wan22-tiny")) {
    s_ = std::make_unique<RunState>(req_, std::move(base), gates::load_prompts(req_.prompts_dir, true));
    s_->gs = req_.gate;
    s_->split_prompts = s_->prompts.split(req_.split);
    s_->split_all = s_->split_used = static_cast<int64_t>(s_->split_prompts.size());
    s_->heldout_all = s_->heldout_used = static_cast<int64_t>(s_->prompts.split(req_.heldout_split).size());
    return *s_;
  }

  std::filesystem::path dir_;
  RunRequest req_;
  std::unique_ptr<RunState> s_;
};

}  // namespace autooptim::orchestrator::testing
