#pragma once
// The deploy check of a tier that runs an agent's plugin (issue 42). Its deploy path, `autooptim generate
// --plugin P --manifest M`, loads the plugin into its own process, so here that process runs in the plugin
// sandbox (gates/plugin_sandbox.h: the binary, the weights and the plugin read-only, a workspace, no network) and
// nothing it says about itself is believed: its clip is the PNG frames it wrote, read and hashed here; its time is
// the difference, measured here, between a process that makes the clip once and one that makes it 1 + repeat
// times, so that loading and the first clip's warm-up cancel out. The baseline is measured the same way in a plain
// process of its own (it runs no plugin's code), so that the two times compare.
#include <string>

#include "orchestrator/deploy_check.h"

namespace autooptim::orchestrator {

// pairs x (baseline, tier) measurements, then judge_deploy. `plugin_file`: the run's copy of the tier's plugin.
// Not run (`not_run` says why) where this machine has no OS sandbox. Throws Error only for a failure of this
// process (a folder it cannot write); a generate that fails is a result (not reproduced, with its log's last line).
DeployResult plugin_deploy_check(const DeploySetup& s, const gates::Manifest& tier, const std::string& plugin_file,
                                 const DeployExpectation& e);

}  // namespace autooptim::orchestrator
