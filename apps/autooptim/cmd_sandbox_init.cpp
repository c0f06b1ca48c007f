// autooptim sandbox-init (hidden): the first process inside an agent's sandbox that has a network
// endpoint (base/sandbox.h). It relays 127.0.0.1:PORT there to the host over a Unix socket, drops every
// capability and runs the agent's command, whose exit status it returns. Started by the sandbox only.
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "base/sandbox_relay.h"

namespace autooptim::app {

namespace {
struct SandboxInitArgs {
  int port = 0;
  std::string socket;
  std::vector<std::string> command;
};
}  // namespace

void add_sandbox_init(CLI::App& app) {
  auto a = std::make_shared<SandboxInitArgs>();
  auto* cmd = app.add_subcommand("sandbox-init", "Relay an agent sandbox's network endpoint and run its command");
  cmd->group("");  // hidden: not a command for users
  cmd->add_option("--listen", a->port, "The port to listen on at 127.0.0.1 inside")
      ->required()
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--socket", a->socket, "The Unix socket of the host's relay")->required();
  cmd->add_option("command", a->command, "The command to run (after --)")->required();
  cmd->callback([a] { exit_status() = base::sandbox_init_main(a->port, a->socket, a->command); });
}

}  // namespace autooptim::app
