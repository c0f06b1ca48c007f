// The baseline against itself: its time is the denominator, and it fills the output cache. Its verdict
// and clips come from the cross-run cache when this weights/build/device/config/prompts/seed gated it
// before; a fresh verdict is stored there for later runs.
#include <unistd.h>

#include <filesystem>

#include "base/atomic_file.h"
#include "base/remove_tree.h"
#include "base/sha256.h"
#include "base/utc_time.h"
#include "orchestrator/phases/phases.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {

std::string baseline_key(const workers::WorkerInfo& w, const gates::Manifest& base, const std::string& split,
                         const std::vector<gates::Prompt>& prompts, const gates::GateSettings& gs) {
  json k = {{"weights", w.weights_id},
            {"build", w.build},
            {"device", w.device},
            {"device_name", w.device_name},
            {"dtype", w.registration.value("dtype", "")},
            {"manifest", gates::manifest_hash(base)},
            {"split", split},
            {"seed", base.config.seed},
            {"repeats", gs.timing_repeats},
            {"max_prompts", gs.max_prompts},
            {"prompts", json::array()}};
  for (const auto& p : prompts) k["prompts"].push_back(p.id + "\n" + p.text);
  return gates::sha256_hex(k.dump()).substr(0, 24);
}

namespace {

void copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  runtime::remove_tree(to, ec);
  fs::create_directories(to.parent_path());
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
}

// A cached verdict and its clips, taken into this run (the gate folder and a ledger row): true when
// there was one.
bool reuse_cached(RunState& s, const fs::path& entry, const fs::path& gate_dir) {
  const auto cached = workers::read_json_file((entry / "verdict.json").string());
  if (!cached || !fs::is_directory(entry / "gate")) return false;
  json v = *cached;
  v["cached_from"] = entry.string();
  v["out_dir"] = gate_dir.string();
  GateRecord record;
  try {
    record = GateRecord::read(v, "the cached baseline verdict " + (entry / "verdict.json").string());
  } catch (const std::exception& e) {
    s.progress.warn(std::string(e.what()) + ": the baseline is gated again");
    return false;
  }
  copy_tree(entry / "gate", gate_dir);
  json row = v;
  const json env = gate_environment_of(s.first_worker);
  for (const auto& [k, val] : env.items()) row[k] = val;
  s.ledger->append(row);
  s.done[{gates::manifest_hash(s.base), s.req.split}] = record;
  s.progress.line("baseline: verdict and clips reused from the cache (" + entry.string() + ")");
  return true;
}

// The fresh verdict and its clips into the cache, replacing the entry whole (a temporary folder renamed).
void store_in_cache(RunState& s, const fs::path& entry, const fs::path& gate_dir) {
  try {
    const fs::path tmp = entry.string() + ".tmp" + std::to_string(getpid());
    copy_tree(gate_dir, tmp / "gate");
    json v = s.base_verdict->row;
    v.erase("out_dir");
    v["cached_at"] = base::utc_timestamp();
    v["cache_key"] = s.baseline_key;
    gates::write_file_atomic((tmp / "verdict.json").string(), v.dump(2) + "\n");
    std::error_code ec;
    runtime::remove_tree(entry, ec);
    fs::rename(tmp, entry);
  } catch (const std::exception& e) {
    s.progress.warn(std::string("the baseline could not be cached for later runs: ") + e.what());
  }
}

}  // namespace

void baseline_phase(RunState& s) {
  s.progress.line("baseline: " + s.base.id +
                  (s.official ? " (official configuration)" : " (REDUCED configuration: no tier can be won)"));
  s.baseline_key = baseline_key(s.first_worker, s.base, s.req.split, s.split_prompts, s.gs);
  const fs::path entry = fs::path(s.cache) / "baselines" / s.baseline_key;
  const fs::path gate_dir = s.out / "gates" / slug(s.base.id) / s.req.split;
  bool cached = false;
  if (!s.done.count({gates::manifest_hash(s.base), s.req.split})) cached = reuse_cached(s, entry, gate_dir);
  s.base_verdict = gate_one(s, s.base, s.req.split, "baseline");
  s.base_seconds = s.base_verdict ? s.base_verdict->baseline_seconds : 0.0;
  if (!cached && s.base_verdict && !s.base_verdict->row.contains("cached_from") && s.base_seconds > 0 &&
      fs::is_directory(gate_dir))
    store_in_cache(s, entry, gate_dir);
}

}  // namespace autooptim::orchestrator
