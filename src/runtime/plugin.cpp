#include "runtime/plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <set>

#include "base/error.h"
#include "base/sha256.h"

namespace autooptim::runtime {

namespace {

std::vector<LoadedPlugin>& plugins() {
  static std::vector<LoadedPlugin> loaded;
  return loaded;
}

// The plugin's overrides, made in a registry of its own: each must belong to one of its techniques (a plugin
// cannot replace a built-in technique's override), then they move into points(). Returns the overrides moved.
size_t adopt_overrides(ext::Points& scratch, const std::set<std::string>& own, const std::string& label) {
  size_t moved = 0;
  ext::Points& global = ext::points();
  ext::for_each_point_pair(scratch, global, [&](auto& from, auto&) {
    for (const auto& o : from.overrides())
      if (!own.count(o.technique))
        throw Error(label + ": an override at " + from.name() + " is registered for '" + o.technique +
                    "', which is not a technique of this plugin");
  });
  ext::for_each_point_pair(scratch, global, [&](auto& from, auto& to) {
    for (const auto& o : from.overrides()) to.add(o), ++moved;
  });
  return moved;
}

}  // namespace

LoadedPlugin load_plugin(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(path + ": no such plugin file");
  const std::string sha = gates::sha256_file_hex(path);
  for (const auto& p : plugins())
    if (p.sha256 == sha) return p;
  const std::string label = "plugin " + path;
  // RTLD_LOCAL: its symbols stay its own; it resolves ours (the binary exports them) and libtorch's.
  void* handle = dlopen(fs::absolute(path).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error(label + ": cannot be loaded: " + dlerror());
  auto abi = reinterpret_cast<int (*)()>(dlsym(handle, "autooptim_plugin_abi"));
  auto entry = reinterpret_cast<void (*)(PluginHost&)>(dlsym(handle, "autooptim_plugin_register"));
  if (!abi || !entry)
    throw Error(label +
                ": not an autooptim plugin (no AUTOOPTIM_PLUGIN entry point; build it with `autooptim agent build`)");
  if (abi() != kPluginAbi)
    throw Error(label + ": built for plugin ABI " + std::to_string(abi()) + ", this binary has " +
                std::to_string(kPluginAbi) + " (rebuild it with this autooptim)");
  ext::Points scratch;
  PluginHost host{scratch, {}};
  entry(host);
  if (host.techniques.empty()) throw Error(label + ": declares no technique");
  std::set<std::string> own;
  for (const auto& t : host.techniques) {
    // Before any override moves: one named like a registered technique would replace that one's.
    if (techniques::find(t.name) || !own.insert(t.name).second)
      throw Error(label + ": technique '" + t.name + "' is registered already");
  }
  if (adopt_overrides(scratch, own, label) == 0) throw Error(label + ": adds no override at any extension point");
  LoadedPlugin loaded{path, sha, {}};
  for (auto& t : host.techniques) {
    t.plugin = sha;
    loaded.techniques.push_back(t.name);
    try {
      techniques::add_technique(std::move(t));
    } catch (const Error& e) {
      throw Error(label + ": " + e.what());
    }
  }
  plugins().push_back(loaded);  // the handle stays open: its code is registered for the process's life
  return loaded;
}

}  // namespace autooptim::runtime
