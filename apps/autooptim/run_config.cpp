#include "run_config.h"

#include <filesystem>

#include "base/error.h"

namespace autooptim::app {

void apply_run_config(CLI::App* cmd, const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw Error("--config " + path + ": no such file");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const std::exception& e) {
    throw Error("--config " + path + ": " + e.what());
  }
  for (const auto& item : items) {
    if (!item.parents.empty())
      throw Error("--config " + path + ": '" + item.fullname() + "': sections are not read (write run options only)");
    const std::string key = item.name;
    if (key == "config") throw Error("--config " + path + ": a configuration file cannot name another");
    CLI::Option* opt = nullptr;
    try {
      opt = cmd->get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
      throw Error("--config " + path + ": '" + key + "' is not an option of run (autooptim run --help lists them)");
    }
    if (opt->count() > 0) continue;  // the command line's value wins
    try {
      opt->add_result(item.inputs);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw Error("--config " + path + ": '" + key + "': " + e.what());
    }
  }
}

}  // namespace autooptim::app
