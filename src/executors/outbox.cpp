#include "executors/outbox.h"

#include <cstdio>
#include <filesystem>

#include "base/atomic_file.h"
#include "gates/plugin_schema.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {

Outbox::Outbox(const std::string& dir, const gates::Manifest& base, std::string family, std::string prefix)
    : dir_(dir), base_(base), family_(std::move(family)), prefix_(std::move(prefix)) {
  fs::create_directories(dir_);
}

void Outbox::log(const workers::TrialResult& t) {
  gates::append_line_durable((fs::path(dir_) / "trials.jsonl").string(), t.to_json().dump());
  std::fprintf(stderr, "[%s] %-40s %6.3fx  PSNR %6.2f dB  (%lld prompts)%s%s\n", family_.c_str(), t.label.c_str(),
               t.speedup, t.psnr_min, static_cast<long long>(t.prompts),
               t.engaged() ? "" : "  not engaged: ", t.engaged() ? "" : t.not_engaged.front().c_str());
}

gates::Manifest patch_of(const gates::Manifest& base, const std::string& family, const std::string& name,
                         const json& flags, bool lossless, const std::string& why, const std::string& label) {
  gates::Manifest m = base;
  m.id = base.model + "/" + family + "/" + name;
  m.kind = "patch";
  m.family = family;
  m.base = base.id;
  m.flags = flags;
  m.lossless = lossless;
  m.description = why;
  m.parents.clear();
  m.plugin = gates::plugin_turned_on(m);  // a plugin's techniques: the manifest pins the plugin's file
  return gates::parse_manifest(gates::to_json(m), label);
}

std::string Outbox::propose(const std::string& slug, const json& flags, bool lossless, const std::string& why) {
  const std::string name = prefix_ + slug;
  const std::string id = base_.model + "/" + family_ + "/" + name;
  const json j = gates::to_json(patch_of(base_, family_, name, flags, lossless, why, "proposal " + id));
  const fs::path dst = fs::path(dir_) / (name + ".json");
  gates::write_file_atomic(dst.string(), j.dump(2) + "\n");
  // The order of the proposals, best first as this executor ranks them: the orchestrator gates each
  // family's first proposal in its first round (alphabetical order put cross_kv_cache before greedy).
  gates::append_line_durable((fs::path(dir_) / "proposals.txt").string(), name + ".json");
  ++proposed_;
  return dst.string();
}

}  // namespace autooptim::executors
