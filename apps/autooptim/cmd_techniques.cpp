// autooptim techniques: lists the technique registry (flags, family, lossless, engagement counters,
// search space), as a table or as JSON.
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "runtime/plugin.h"
#include "runtime/techniques/registry.h"

namespace autooptim::app {
namespace {

struct TechniquesArgs {
  std::vector<std::string> plugins;
  bool json = false;
  int64_t steps = 50;
  bool gpu = false;
};

void run_techniques(const TechniquesArgs& a) {
  namespace tech = runtime::techniques;
  for (const auto& p : a.plugins) runtime::load_plugin(p);
  const tech::SearchContext ctx{a.steps, a.gpu};
  if (a.json) {
    std::cout << tech::registry_to_json(ctx).dump(2) << "\n";
    return;
  }
  for (const auto& t : tech::all()) {
    std::printf("%-18s %-7s %-9s %s%s\n", t.name.c_str(), t.family.c_str(), t.lossless ? "lossless" : "lossy",
                t.summary.c_str(), t.plugin.empty() ? "" : (" [plugin " + t.plugin.substr(0, 12) + "]").c_str());
    for (const auto& f : t.flags) {
      std::printf("    %-34s %-12s default %s\n", t.path_of(f).c_str(), tech::to_string(f.type),
                  f.default_value().dump().c_str());
    }
  }
  std::printf("settings (not techniques):");
  for (const auto& s : tech::settings()) std::printf(" %s", s.key.c_str());
  std::printf("\n");
}

}  // namespace

void add_techniques(CLI::App& app) {
  auto a = std::make_shared<TechniquesArgs>();
  auto* cmd =
      app.add_subcommand("techniques", "List the registered techniques: flags, family, engagement, search space");
  cmd->add_flag("--json", a->json, "Print the registry as JSON");
  cmd->add_option("--plugin", a->plugins, "Load a technique plugin first (autooptim agent build; repeatable)");
  cmd->add_option("--steps", a->steps, "Steps of the run the listed search spaces are for")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--gpu", a->gpu, "List the search spaces of a GPU run");
  cmd->callback([a] { run_techniques(*a); });
}

}  // namespace autooptim::app
