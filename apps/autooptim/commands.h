#pragma once
// One registration function per subcommand; each adds its CLI11 subcommand and its callback.
#include <CLI/CLI.hpp>

#include <functional>

namespace autooptim::app {

// The exit status a subcommand's callback sets: 0 ok, 1 a check failed, 2 could not run.
int& exit_status();

void add_verify(CLI::App& app);
void add_generate(CLI::App& app);
void add_bench(CLI::App& app);
void add_gate(CLI::App& app);
void add_run(CLI::App& app);
void add_executor(CLI::App& app);
void add_techniques(CLI::App& app);

}  // namespace autooptim::app
