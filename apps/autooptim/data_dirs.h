#pragma once
// Where prompts/ and manifests/ are found, so the binary works from any working directory: the path
// given on the command line, else ./<name>, else next to the binary (<bin>/<name>, an installed
// <prefix>/bin/../share/autooptim/<name>), else the install data dir and the source tree compiled in.
#include <string>
#include <vector>

namespace autooptim::app {

// given_explicitly: the user named the folder; then only that path is tried. Throws Error listing
// every place looked at when none holds the folder.
std::string find_data_dir(const std::string& name, const std::string& given, bool given_explicitly);

// The places find_data_dir looks at for a default (in order).
std::vector<std::string> data_dir_candidates(const std::string& name);

}  // namespace autooptim::app
