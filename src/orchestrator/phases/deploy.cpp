// The deploy check of every tier (docs/deploy.md), on the device the first worker had, once the workers
// have left it: the tier's manifest through `generate --manifest`, as a user deploys it, against the
// baseline through the same path. A tier that does not reproduce is not delivered.
#include <filesystem>
#include <map>
#include <optional>

#include "base/error.h"
#include "base/stop_signals.h"
#include "orchestrator/deploy_check.h"
#include "orchestrator/plugin_deploy.h"
#include "orchestrator/phases/phases.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

// The deploy check of one tier's manifest: through `generate` as a user runs it, or, for a tier that runs an
// agent's plugin, in the plugin sandbox and measured from outside (orchestrator/plugin_deploy.h).
DeployResult deploy_one(RunState& s, const DeploySetup& setup, const gates::Manifest& m) {
  DeploySetup ds = setup;
  ds.dir = (s.out / "deploy" / slug(m.id)).string();
  DeployResult r;
  std::optional<DeployExpectation> expected;
  try {
    expected = expectation_from_gate_dir((s.out / "gates" / slug(m.id) / s.req.split).string(), ds.prompt.id);
  } catch (const Error& e) {  // its gate run's verdict does not read: nothing to hold the deploy path to
    r.not_run = e.what();
    return r;
  }
  if (m.plugin.empty()) {
    s.progress.line("deploy check of " + m.id + ": generate --manifest against the baseline, " +
                    std::to_string(ds.pairs) + " pairs");
    return deploy_check(ds, m, *expected);
  }
  const auto file = s.plugin_files.find(m.plugin);
  if (file == s.plugin_files.end()) {
    r.not_run = "the run holds no copy of plugin " + m.plugin.substr(0, 12) + " (resumed without its outbox?)";
    return r;
  }
  s.progress.line("deploy check of " + m.id + ": generate --plugin in the plugin sandbox against the baseline, " +
                  std::to_string(ds.pairs) + " pairs, timed from outside");
  return plugin_deploy_check(ds, m, file->second, *expected);
}

// One check per distinct manifest; a tier that fails its check leaves `tiers` for a note. `not_run` says
// why none ran (empty: run).
json check_deploys(RunState& s, const DeploySetup& setup, const std::string& not_run) {
  std::map<std::string, json> by_hash;
  json checks = json::array();
  for (const auto& [bucket, need] : tier_buckets()) {
    json& t = s.tiers[bucket];
    if (t.is_null()) continue;
    const gates::Manifest m = gates::parse_manifest(t["resolved_manifest"], "the " + bucket + " tier");
    const std::string hash = gates::manifest_hash(m);
    if (!by_hash.count(hash)) {
      DeployResult r;
      if (!not_run.empty() || (setup.stop && setup.stop())) {
        r.not_run = not_run.empty() ? "interrupted" : not_run;
      } else {
        r = deploy_one(s, setup, m);
      }
      by_hash[hash] = r.to_json();
      checks.push_back({{"manifest", m.id}, {"result", by_hash[hash]}});
    }
    t["deploy"] = by_hash[hash];
    if (!deliverable(t["deploy"], need)) {
      s.tier_notes[bucket].push_back(m.id + " won the tier in its gate runs but " + deploy_summary(t["deploy"]) +
                                     ": not delivered");
      t = nullptr;
    } else if (t["deploy"].value("ran", false) && !t["deploy"].value("reproduced", false)) {
      s.tier_notes[bucket].push_back(m.id + " is slower through generate than in its gate (" +
                                     t["deploy"].value("reason", std::string()) + "); it still holds " + bucket +
                                     " through the deploy path");
    }
  }
  return checks;
}

}  // namespace

void deploy_phase(RunState& s) {
  // A worker that died after the janitor's last look (the last gate ended first) is still reported.
  s.launcher->no_restarts();
  keep_workers(s);
  // The workers leave; their final counters (held time, generating time, peak memory) go in the report.
  s.launcher->stop(base::StopSignals::signal() ? 5 : 30);
  DeploySetup ds;
  ds.model_cli = s.req.model_cli;
  ds.cuda_visible = s.slots.empty() ? "" : s.slots.front().cuda_visible;
  ds.threads = s.first_worker.registration.value("threads", int64_t{0});
  ds.weights_dir = s.first_worker.registration.value("weights_dir", std::string());
  ds.baseline = s.base;
  ds.prompt = s.split_prompts.front();
  ds.seed = s.base.config.seed;
  ds.pairs = s.req.deploy_pairs;
  ds.stop = [] { return base::StopSignals::signal() != 0; };
  const std::string not_run = !s.req.deploy_check ? "--no-deploy-check"
                              : s.slurm ? "the workers ran as Slurm tasks on other hosts: run generate --manifest there"
                                        : "";
  s.deploy_checks = check_deploys(s, ds, not_run);
}

}  // namespace autooptim::orchestrator
