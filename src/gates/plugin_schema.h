#pragma once
// A plugin's techniques as the gate knows them: by their description only. The gate never loads a plugin
// (issue 42); it asks a generation worker that did (gates/sandboxed_worker.h) to describe the plugin's
// techniques, and registers each here as a schema: its name, family, flags (types, ranges, defaults),
// switch, hooks and engagement counters, with no code. Manifests that pin the plugin then parse, hash and
// validate in the gate as any other; their flags are held as values (no options struct), and this process's
// worker refuses to run them (they would run as the baseline): only the plugin's worker runs them.
#include <nlohmann/json.hpp>
#include <string>

#include "gates/manifest.h"
#include "runtime/options.h"

namespace autooptim::gates {

// Registers the described techniques of the plugin `sha256` (a second call for the same plugin does nothing).
// Throws Error naming the problem: a malformed description, or one the registry refuses (a built-in's name).
void register_plugin_schema(const std::string& sha256, const nlohmann::json& techniques);
// The first technique on in `o` that this process knows by its description only, or "".
std::string schema_only_technique_on(const runtime::RuntimeOptions& o);
// True when techniques of plugin `sha256` are registered in this process (by description, or loaded).
bool plugin_known(const std::string& sha256);
// The plugin whose techniques `m`'s flags turn on ("" for none): the pin `m` must carry. Error when they come
// from two plugins: a manifest runs one plugin's code.
std::string plugin_turned_on(const Manifest& m);

}  // namespace autooptim::gates
