#include "executors/agent_spec.h"

#include <algorithm>

#include "base/error.h"
#include "base/strings.h"

namespace autooptim::executors {

const std::vector<std::string>& agent_families() {
  static const std::vector<std::string> f = {"kernel", "cache", "sparse", "quant", "vae"};
  return f;
}

AgentSpec parse_agent_arg(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--agent '" + arg + "': expected FAMILY=COMMAND (e.g. cache='claude -p \"$(cat {brief})\"')");
  AgentSpec s;
  s.family = arg.substr(0, eq);
  s.command = arg.substr(eq + 1);
  const auto& f = agent_families();
  if (std::find(f.begin(), f.end(), s.family) == f.end())
    throw Error("--agent '" + arg + "': unknown family '" + s.family + "' (" + base::join(f, ", ") + ")");
  if (s.command.find_first_not_of(" \t") == std::string::npos)
    throw Error("--agent '" + arg + "': the command is empty");
  return s;
}

}  // namespace autooptim::executors
