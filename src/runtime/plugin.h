#pragma once
// Technique plugins (issue 42): a shared object built from one source file against the installed headers
// (`autooptim agent build`), loaded into a process that runs the model. Its techniques join the registry
// (techniques::add_technique, with Technique::plugin = the object's sha256, so that a manifest turning one on
// must pin the plugin) and its overrides join the extension points, exactly as a built-in technique's do.
//
// A plugin's source defines its options struct, its Technique and its overrides, and one entry point:
//
//   AUTOOPTIM_PLUGIN(host) {
//     host.techniques.push_back(my_technique());
//     host.points.linear.add({"my_technique", 10, [](const RuntimeOptions& o) { return o.of<MyOptions>().on; }, ...});
//   }
//
// The macro also writes the ABI version the plugin was built against; a plugin of another version is refused.
// Loading runs the plugin's code in this process: only a process that the gate does not trust may load one.
#include <string>
#include <vector>

#include "runtime/extension_points.h"
#include "runtime/techniques/registry.h"

namespace autooptim::runtime {

// Bumped whenever a header a plugin sees changes incompatibly (a struct's layout, a point's signature).
constexpr int kPluginAbi = 2;  // 2: ForwardReplay::computed_last

// What a plugin's entry point fills: the techniques it declares, and the points to add its overrides at.
struct PluginHost {
  ext::Points& points;
  std::vector<techniques::Technique> techniques;
};

struct LoadedPlugin {
  std::string path;
  std::string sha256;                   // of the file as loaded
  std::vector<std::string> techniques;  // the names it registered
};

// Loads the plugin at `path` once (a second call with the same file returns the first load): checks its ABI,
// runs its entry point and registers its techniques. Throws an Error naming the file and the problem (no such
// file, not a shared object, no entry point, another ABI, a technique that does not pass the registry's checks,
// one that adds no override at any point). Returns a copy: later loads may move the list.
LoadedPlugin load_plugin(const std::string& path);

}  // namespace autooptim::runtime

#define AUTOOPTIM_PLUGIN(host)                                                       \
  extern "C" int autooptim_plugin_abi() { return ::autooptim::runtime::kPluginAbi; } \
  extern "C" void autooptim_plugin_register(::autooptim::runtime::PluginHost& host)
