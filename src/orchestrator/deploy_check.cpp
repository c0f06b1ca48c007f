#include "orchestrator/deploy_check.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/atomic_file.h"
#include "orchestrator/gate_record.h"
#include "base/error.h"
#include "base/spawn.h"
#include "base/stats.h"
#include "workers/protocol.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::orchestrator {
namespace {

std::string fixed(double v, int digits) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// A JSON file a process wrote, or null when it is missing or does not parse.
json read_json_or_null(const fs::path& p) { return workers::read_json_file(p.string()).value_or(json()); }

// One `autooptim generate` process; returns its JSON (null when it failed, `why` then says how).
json run_generate(const DeploySetup& s, const fs::path& manifest, const fs::path& stem, std::string* why) {
  const std::string json_out = stem.string() + ".json", log = stem.string() + ".log";
  std::vector<std::string> args = {"autooptim", "generate"};
  args.insert(args.end(), s.model_cli.begin(), s.model_cli.end());
  args.insert(args.end(),
              {"--manifest", manifest.string(), "--prompt", s.prompt.text, "--seed", std::to_string(s.seed), "--json",
               json_out, "--repeat", std::to_string(s.repeat), "--threads", std::to_string(s.threads), "--quiet"});
  fs::remove(json_out);
  runtime::SelfSpawn sp;
  sp.args = args;
  sp.env = s.cuda_visible.empty()
               ? runtime::environment_with({}, {})
               : runtime::environment_with({"CUDA_VISIBLE_DEVICES"}, {"CUDA_VISIBLE_DEVICES=" + s.cuda_visible});
  sp.log_file = log;
  sp.header = "autooptim deploy check:";
  for (const auto& a : args) sp.header += " " + a;
  sp.header += "\n";
  sp.what = "a deploy-check generate";
  const pid_t pid = runtime::spawn_self(sp);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (s.stop && s.stop()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *why = "interrupted";
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *why = "generate failed (" +
           (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status)) : std::string("killed by a signal")) +
           ", " + log + "): " + runtime::last_log_line(log);
    return nullptr;
  }
  json j = read_json_or_null(json_out);
  if (!j.is_object() || !j.contains("runs") || j["runs"].empty()) *why = json_out + ": generate wrote no result";
  return j;
}

// Every run of a process made the expected clip.
bool same_clip(const json& g, const std::string& expected) {
  if (expected.empty()) return false;
  for (const auto& r : g["runs"])
    if (r.value("frames_sha256", "") != expected) return false;
  return true;
}

}  // namespace

json DeployResult::to_json() const {
  json j = {{"ran", ran}};
  if (!ran) {
    j["not_run"] = not_run;
    return j;
  }
  j.update({{"bit_exact", bit_exact},
            {"baseline_bit_exact", baseline_bit_exact},
            {"speedup", speedup},
            {"baseline_s", baseline_s},
            {"tier_s", tier_s},
            {"spread", spread},
            {"tolerance", tolerance},
            {"reproduced", reproduced},
            {"reason", reason}});
  if (!how.empty()) j["how"] = how;
  return j;
}

DeployExpectation expectation_from_gate_dir(const std::string& gate_dir, const std::string& prompt_id) {
  DeployExpectation e;
  const json clips = read_json_or_null(fs::path(gate_dir) / "clips.json");
  if (clips.is_object() && clips.value("clips", json::object()).contains(prompt_id)) {
    const json& c = clips["clips"][prompt_id];
    e.clip_sha256 = c.value("frames_sha256", "");
    e.baseline_sha256 = c.value("baseline_frames_sha256", "");
  }
  const fs::path file = fs::path(gate_dir) / "verdict.json";
  const json v = read_json_or_null(file);
  if (v.is_null()) return e;
  const GateRecord r = GateRecord::read(v, file.string());
  e.gated_speedup = r.speedup;
  const json& perf = r.performance_details();
  e.gate_noise = perf.value("margin", perf.value("noise", 0.0));
  return e;
}

void judge_deploy(DeployResult& r, const DeployExpectation& e) {
  const auto b = runtime::TimingStats::of(r.baseline_s), t = runtime::TimingStats::of(r.tier_s);
  r.speedup = t.median > 0 ? b.median / t.median : 0.0;
  r.spread = std::max(b.spread(), t.spread());
  r.tolerance = std::max(e.gate_noise, r.spread);
  const double need = e.gated_speedup * (1.0 - r.tolerance);
  if (e.clip_sha256.empty())
    r.reason = "the gate run recorded no clip to compare with (no clips.json: made by an older autooptim?)";
  else if (!r.bit_exact)
    r.reason = "the clip made through generate is not the gate's clip (frames differ)";
  else if (!r.baseline_bit_exact)
    r.reason = "the baseline through generate is not the gate's baseline clip (frames differ)";
  else if (r.speedup < need)
    r.reason = "reproduced " + fixed(r.speedup, 2) + "x against the gated " + fixed(e.gated_speedup, 2) +
               "x, below the " + fixed(need, 2) + "x that the noise allows (" + fixed(100 * r.tolerance, 0) + "%)";
  else
    r.reason = "reproduced " + fixed(r.speedup, 2) + "x (gated " + fixed(e.gated_speedup, 2) + "x, tolerance " +
               fixed(100 * r.tolerance, 0) + "%), bit-exact clips";
  r.reproduced = !e.clip_sha256.empty() && r.bit_exact && r.baseline_bit_exact && r.speedup >= need;
}

DeployResult run_deploy_pairs(const DeploySetup& s, const DeployExpectation& e,
                              const std::function<DeploySide(bool is_tier, int64_t pair)>& measure, DeployResult r) {
  r.bit_exact = r.baseline_bit_exact = true;
  for (int64_t i = 0; i < s.pairs; ++i) {
    for (const bool is_tier : {false, true}) {
      const DeploySide m = measure(is_tier, i);
      if (m.why == "interrupted") {  // no verdict: a resumed run checks again
        r.not_run = "interrupted";
        r.ran = false;
        return r;
      }
      r.ran = true;
      if (!m.why.empty()) {
        r.reason = m.why;
        r.bit_exact = false;
        return r;
      }
      (is_tier ? r.tier_s : r.baseline_s).push_back(m.seconds);
      (is_tier ? r.bit_exact : r.baseline_bit_exact) &= m.expected_clip;
    }
  }
  judge_deploy(r, e);
  return r;
}

DeployResult deploy_check(const DeploySetup& s, const gates::Manifest& tier, const DeployExpectation& e) {
  fs::create_directories(s.dir);
  const fs::path dir(s.dir), tier_path = dir / "tier.json", base_path = dir / "baseline.json";
  gates::write_file_atomic(tier_path.string(), gates::to_json(tier).dump(2) + "\n");
  gates::write_file_atomic(base_path.string(), gates::to_json(s.baseline).dump(2) + "\n");
  return run_deploy_pairs(s, e, [&](bool is_tier, int64_t i) {
    DeploySide side;
    const json g = run_generate(s, is_tier ? tier_path : base_path,
                                dir / ((is_tier ? "tier-" : "baseline-") + std::to_string(i)), &side.why);
    if (!side.why.empty()) return side;
    side.seconds = g["runs"].back().value("seconds", 0.0);
    side.expected_clip = same_clip(g, is_tier ? e.clip_sha256 : e.baseline_sha256);
    return side;
  });
}

bool deliverable(const json& d, double need) {
  if (!d.is_object() || !d.value("ran", false)) return true;
  return d.value("bit_exact", false) && d.value("baseline_bit_exact", false) &&
         d.value("speedup", 0.0) >= need * (1.0 - d.value("tolerance", 0.0));
}

std::string deploy_summary(const json& d) {
  if (!d.is_object()) return "not checked";
  if (!d.value("ran", false)) return "not checked: " + d.value("not_run", std::string("?"));
  const std::string exact = d.value("bit_exact", false) ? "yes" : "no";
  if (d.value("reproduced", false)) return "reproduced " + fixed(d.value("speedup", 0.0), 2) + "x, bit-exact: " + exact;
  return "did not reproduce (" + fixed(d.value("speedup", 0.0), 2) + "x, bit-exact: " + exact +
         "): " + d.value("reason", std::string());
}

}  // namespace autooptim::orchestrator
