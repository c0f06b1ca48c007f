#pragma once
// The technique registry: what every technique declares about itself, in one place per technique.
//
// A technique is one source file under techniques/<family>/ (plus its header, and its CUDA file where
// it has one). Its <name>_options.h declares its options struct (FusedQkvOptions, EasyCacheOptions, ...),
// which RuntimeOptions holds by type without knowing it (runtime/technique_options.h). The file opens with
// AUTOOPTIM_TECHNIQUE(name) { ... }, which returns its Technique: its flags (name, type, range, default,
// bound to a field of its options struct: field(&EasyCacheOptions::threshold)), family, whether it is
// lossless, the switch that turns it on, the counters that prove it engaged, its executor search space and
// the hook sites it runs at. Manifest parsing and serialization, the engagement check, `autooptim
// techniques` and the executors all read this registry; the forward reads the typed options struct
// (opts->of<FusedQkvOptions>().on, ...).
//
// The file is compiled twice: into the torch-free registry library (AUTOOPTIM_TECHNIQUE_SPECS defined,
// so the manifest code links it without libtorch: only the declaration is compiled) and into the
// runtime (AUTOOPTIM_TECHNIQUE_HOOKS is 1: its torch code, the hooks the forward calls). Everything a
// file includes before `#if AUTOOPTIM_TECHNIQUE_HOOKS` must be torch-free: its options struct is included
// there from its torch-free <name>_options.h (its <name>.h, if any, is torch code and includes it too).
// src/runtime/CMakeLists.txt finds the files by their AUTOOPTIM_TECHNIQUE line; nothing else lists them.
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/options.h"
#include "runtime/trace.h"

namespace autooptim::runtime::techniques {

enum class FlagType { kBool, kInt, kNumber, kChoice, kIntList, kNumberList };
const char* to_string(FlagType t);

// A problem with a flag value: `where` is appended to the flag's path ("" or "[2]"), then ": message".
struct FlagProblem {
  std::string where;
  std::string message;
};

struct FlagSpec {
  std::string key;  // within the technique's group, or a top-level flag name when it has none
  FlagType type = FlagType::kBool;
  std::string help;
  // kInt, kIntList: [int_min, int_max]. kNumber, kNumberList: between min and max, each bound
  // excluded when its *_open is set.
  int64_t int_min = 0, int_max = 0;
  double min = 0, max = 0;
  bool min_open = false, max_open = false;
  std::vector<std::string> choices;  // kChoice
  size_t max_items = 0;              // lists
  // Written in the canonical (resolved) flags even at its default: the flags that existed before the
  // registry, so the canonical form and hash of existing manifests do not change. Later flags are
  // written only when they differ from their default.
  bool always_written = false;
  std::function<nlohmann::json(const RuntimeOptions&)> get;
  std::function<void(RuntimeOptions&, const nlohmann::json&)> set;  // value already validated

  // The value's problem (type, range, choice), if any.
  std::optional<FlagProblem> validate(const nlohmann::json& v) const;
  nlohmann::json default_value() const { return get(RuntimeOptions{}); }
  nlohmann::json to_json() const;  // the listing's description of the flag
};

// What a flag is bound to: one field of a technique's options struct in RuntimeOptions (or, for the
// settings, a field of RuntimeOptions itself), read without changing the options and changed in place.
template <typename T>
struct Field {
  std::function<const T&(const RuntimeOptions&)> get;
  std::function<T&(RuntimeOptions&)> edit;
};
// The flag's field: `member` of the technique's own options struct, e.g. field(&EasyCacheOptions::threshold)
// (stored in RuntimeOptions by type: RuntimeOptions::of<EasyCacheOptions>()).
template <typename Options, typename T>
Field<T> field(T Options::*member) {
  return {[member](const RuntimeOptions& o) -> const T& { return o.of<Options>().*member; },
          [member](RuntimeOptions& o) -> T& { return o.of<Options>().*member; }};
}
// Flag builders: `bound` is the field the flag is bound to.
FlagSpec bool_flag(std::string key, Field<bool> bound, std::string help);
FlagSpec int_flag(std::string key, Field<int64_t> bound, int64_t lo, int64_t hi, std::string help);
// Bounds: `lo_open`/`hi_open` exclude them; an infinite bound is no bound.
FlagSpec number_flag(std::string key, Field<double> bound, double lo, bool lo_open, double hi, bool hi_open,
                     std::string help);
FlagSpec choice_flag(std::string key, Field<std::string> bound, std::vector<std::string> choices, std::string help);
FlagSpec int_list_flag(std::string key, Field<std::vector<int64_t>> bound, int64_t lo, int64_t hi, size_t max_items,
                       std::string help);
FlagSpec number_list_flag(std::string key, Field<std::vector<double>> bound, double lo, double hi, size_t max_items,
                          std::string help);
// Marks flags as written in the canonical form even at their default (see FlagSpec::always_written).
std::vector<FlagSpec> always_written(std::vector<FlagSpec> flags);

// What the executor's search is for: the run's steps and whether it runs on a GPU.
struct SearchContext {
  int64_t steps = 50;
  bool gpu = false;
};

// One candidate of a technique's search space: flags to measure (a manifest's "flags" fragment).
struct SearchPoint {
  std::string label;  // short, file-name safe: also the proposal's slug
  nlohmann::json flags;
};

// A counter that must be non-zero when the technique is on. "<flag>" in the counter and the message
// is replaced by that flag's value ("kernel.attention.<attention_backend>.calls").
struct EngagementCounter {
  std::string counter;
  std::string not_engaged;  // the message: "<name> is on but ..."; " (<counter> = 0)" is appended
};

// A calibration a technique needs before its search (measured on visible prompts only; the result is
// stored in the manifest's flags).
struct Calibration {
  nlohmann::json flags;  // what to run to calibrate (flags fragment)
  // The traces of the calibration runs -> the flags fragment to merge into every search point.
  std::function<nlohmann::json(const std::vector<Trace>&)> fit;
};

struct Technique {
  std::string name;
  std::string family;  // a manifest family with an executor: kernel | cache | sparse (| quant)
  bool lossless = false;
  std::string summary;
  // "" for top-level flags (flags.fused_qkv); else the object they live in (flags.easycache.threshold).
  std::string group;
  std::vector<FlagSpec> flags;
  // The flag that turns it on: on when it differs from its default (easycache.enabled, sparse.pattern).
  std::string switch_flag;
  // Techniques sharing a non-empty exclusive group cannot be on together (one cache policy at a time).
  std::string exclusive_group;
  std::vector<std::string> hooks;  // where it runs in the forward, for the listing and the docs
  // Techniques this one leaves idle when both are on, because it does their work its own way (the sm_90a
  // attention kernel takes every attention an attention_backend would have run). An idle technique fails
  // the gate's engagement check, so a composition drops it and the engagement message names this one.
  std::vector<std::string> supersedes;
  std::vector<EngagementCounter> engagement;
  // Further engagement checks (consistency of its counters); may be empty.
  std::function<void(const RuntimeOptions&, const Trace&, std::vector<std::string>&)> check_counters;
  // Rules across its own flags, beyond each flag's range (e.g. a calibration it needs); may be empty.
  std::function<std::optional<FlagProblem>(const RuntimeOptions&)> check_flags;
  std::function<std::vector<SearchPoint>(const SearchContext&)> search;  // may be empty: never proposed
  // The policy skips the same steps on every model (a schedule, not a rule on the model's outputs), so a
  // trial of it always engages: the cache executor tries it next when an adaptive policy skipped nothing.
  bool fixed_schedule = false;
  std::optional<Calibration> calibration;
  // A cache policy's declared dense work, where it has one: its warm-up steps (the first steps computed in
  // full) and whether the last step is computed in full. The gate's work floor checks both against the
  // steps the loop ran, and the red team's skip_warmup cuts the warm-up of every policy that declares one.
  std::function<int64_t&(RuntimeOptions&)> warmup_steps;
  std::function<bool(const RuntimeOptions&)> dense_last_step;
  // A plugin's technique (runtime/plugin.h): the sha256 of the shared object it came from; "" for a built-in.
  // A manifest that turns it on must pin that plugin ("plugin": <sha256>).
  std::string plugin;

  // The flag's path in a manifest: "fused_qkv", "easycache.threshold".
  std::string path_of(const FlagSpec& f) const { return group.empty() ? f.key : group + "." + f.key; }
  const FlagSpec* flag(const std::string& key) const;
  bool on(const RuntimeOptions& o) const;
  nlohmann::json to_json(const SearchContext& reference) const;  // the listing's entry
};

// Every registered technique: the built-in ones by family then name, then the plugins' in the order added.
// References stay valid when a plugin adds one.
const std::deque<Technique>& all();
// Adds a plugin's technique after the checks every built-in one passes (a family, flags, its switch flag; a
// name, flag group and top-level flags no other technique has); throws an Error naming the problem.
void add_technique(Technique t);
// The technique called `name`, or null.
const Technique* find(const std::string& name);
// Whether a technique that is on under `o` works on the VAE decode (a hook "vae.*" or "pipeline.decode"):
// the gate then lets the decode be faster than the baseline's.
bool works_on_decode(const RuntimeOptions& o);
// Likewise for the text encoding (a hook "text_encoder.*" or "pipeline.encode_text").
bool works_on_text_encoding(const RuntimeOptions& o);
// The runtime settings that are flags but not techniques (dtype, cpu_threads, onednn): top-level,
// always written, kept by the off run.
const std::vector<FlagSpec>& settings();

// The flags object of `o` in canonical form: settings and always-written flags, every other flag that
// differs from its default (a group written whole when any of its flags is written).
nlohmann::json flags_to_json(const RuntimeOptions& o);
// Dotted names of the technique flags whose value in `o` differs from the default, sorted.
std::vector<std::string> technique_flags_set(const RuntimeOptions& o);
// The techniques of `family` that are on in `o`.
std::vector<std::string> techniques_on(const RuntimeOptions& o);
// The techniques on in `o` that another technique on in `o` supersedes: {idle one, the one that takes its
// place}, in registry order.
std::vector<std::pair<std::string, std::string>> superseded(const RuntimeOptions& o);

// The listing `autooptim techniques --json` prints: {"techniques": [...], "settings": [...]}.
nlohmann::json registry_to_json(const SearchContext& reference = {});

// " (did you mean 'x'?)" for the valid name within two edits of `name`, else "".
std::string did_you_mean(const std::string& name, const std::vector<std::string>& valid);
// JSON value shown in messages: type and (truncated) text.
std::string describe(const nlohmann::json& j);

}  // namespace autooptim::runtime::techniques

#ifdef AUTOOPTIM_TECHNIQUE_SPECS
#define AUTOOPTIM_TECHNIQUE_HOOKS 0
#define AUTOOPTIM_TECHNIQUE(name) ::autooptim::runtime::techniques::Technique autooptim_technique_##name()
#else
#define AUTOOPTIM_TECHNIQUE_HOOKS 1
// In the runtime's compilation the declaration is compiled but unused (the registry library has it).
#define AUTOOPTIM_TECHNIQUE(name) \
  [[maybe_unused]] static ::autooptim::runtime::techniques::Technique autooptim_technique_##name()
#endif
