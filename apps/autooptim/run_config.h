#pragma once
// `run --config FILE`: any run option from a TOML file (`budget-minutes = 90`, `agent = ["cache=..."]`,
// `agent-only = true`), applied after the command line is parsed: an option given on the command line wins.
// CLI11's own set_config reads files for the top-level app only, not for a subcommand such as run.
#include <CLI/CLI.hpp>

#include <string>

namespace autooptim::app {

// Sets every option the file names that the command line did not give; Error naming the file and the key for
// an unknown option, a section, or a value the option refuses.
void apply_run_config(CLI::App* cmd, const std::string& path);

}  // namespace autooptim::app
