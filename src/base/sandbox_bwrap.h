#pragma once
// bubblewrap's command line for a SandboxSpec: which namespaces, which folders are visible and how.
#include <string>
#include <vector>

#include "base/sandbox.h"

namespace autooptim::base {

inline constexpr const char* kInsideWorkspace = "/workspace";
inline constexpr const char* kInsideChannel = "/channel";
inline constexpr const char* kInsideNetDir = "/run/autooptim";  // the relay's socket, read-only
inline constexpr const char* kNetSocketName = "net.sock";

// The bwrap executable (PATH, then /usr/bin/bwrap), "" when there is none.
std::string find_bwrap();

// The whole argv of bwrap (argv[0] = `bwrap`) running `command` for `spec`. `status_fd`: bwrap's
// --json-status-fd; `net_dir`: the host folder with the relay socket and hosts file ("" without network).
std::vector<std::string> bwrap_args(const std::string& bwrap, const SandboxSpec& spec, int status_fd,
                                    const std::string& net_dir, const std::vector<std::string>& command);

}  // namespace autooptim::base
