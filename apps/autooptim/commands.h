#pragma once
// One registration function per subcommand; each adds its CLI11 subcommand and its callback.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace autooptim::app {

// The exit status a subcommand's callback sets: 0 ok, 1 a check failed, 2 could not run.
int& exit_status();
// The command line as typed (for reports).
std::vector<std::string>& command_line();

void add_verify(CLI::App& app);
void add_generate(CLI::App& app);
void add_bench(CLI::App& app);
void add_gate(CLI::App& app);
void add_run(CLI::App& app);
void add_executor(CLI::App& app);
void add_worker(CLI::App& app);
void add_techniques(CLI::App& app);
void add_train(CLI::App& app);
void add_eval_tiny(CLI::App& app);
void add_compare(CLI::App& app);
void add_sandbox_init(CLI::App& app);
void add_agent(CLI::App& app);
// autooptim agent build: a technique plugin compiled as this binary was (cmd_agent_build.cpp).
void add_agent_build(CLI::App& agent);

}  // namespace autooptim::app
namespace autooptim::gates {
struct GateProgress;
}
namespace autooptim::app {
// A gate's progress as a line: the key (manifest, split, stage) and the detail (run k/n, elapsed).
std::string gate_progress_key(const gates::GateProgress& p);
std::string gate_progress_detail(const gates::GateProgress& p);

}  // namespace autooptim::app
