#include "data_dirs.h"

#include <unistd.h>

#include <filesystem>

#include "base/error.h"

namespace fs = std::filesystem;

namespace autooptim::app {
namespace {

fs::path exe_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::vector<std::string> data_dir_candidates(const std::string& name) {
  std::vector<std::string> c = {name};
  const fs::path bin = exe_dir();
  if (!bin.empty()) {
    c.push_back((bin / name).string());
    c.push_back((bin.parent_path() / "share" / "autooptim" / name).string());
  }
#ifdef AUTOOPTIM_DATA_DIR
  c.push_back((fs::path(AUTOOPTIM_DATA_DIR) / name).string());
#endif
#ifdef AUTOOPTIM_SOURCE_DATA_DIR
  c.push_back((fs::path(AUTOOPTIM_SOURCE_DATA_DIR) / name).string());
#endif
  return c;
}

std::string find_data_dir(const std::string& name, const std::string& given, bool given_explicitly) {
  std::error_code ec;
  if (given_explicitly) {
    if (!fs::is_directory(given, ec)) throw Error(given + ": no such folder (given for the " + name + "/ folder)");
    return fs::absolute(given).string();
  }
  const auto c = data_dir_candidates(name);
  for (const auto& p : c)
    if (fs::is_directory(p, ec)) return fs::absolute(p).string();
  std::string looked;
  for (const auto& p : c) looked += "\n  " + p;
  throw Error("cannot find the " + name + "/ folder; looked at:" + looked +
              "\ninstall autooptim (cmake --install), run it from the source tree, or pass --" + name + "-dir");
}

}  // namespace autooptim::app
