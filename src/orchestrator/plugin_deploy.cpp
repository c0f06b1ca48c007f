#include "orchestrator/plugin_deploy.h"

#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/sandbox.h"
#include "base/spawn.h"
#include "gates/clip_digest.h"
#include "gates/plugin_sandbox.h"
#include "runtime/video_io.h"

namespace fs = std::filesystem;

namespace autooptim::orchestrator {
namespace {

using Clock = std::chrono::steady_clock;

// One generate process as measured from here: its whole wall time and the digest of the frames it wrote.
struct Measured {
  double wall_s = 0;
  std::string frames_sha256;
  std::string why;  // "" when it made a clip; "interrupted", or how it failed
};

// The process's model options, its weights (the first worker's when the options name none) at the path it sees
// them by.
std::vector<std::string> model_args(const DeploySetup& s, const gates::PluginProcess& p) {
  std::vector<std::string> a;
  bool named = false;
  for (size_t i = 0; i < s.model_cli.size(); ++i) {
    a.push_back(s.model_cli[i]);
    if (s.model_cli[i] == "--weights" && i + 1 < s.model_cli.size()) {
      a.push_back(gates::plugin_process_weights(p));
      named = true;
      ++i;
    }
  }
  if (!named && !p.weights_dir.empty()) a.insert(a.end(), {"--weights", gates::plugin_process_weights(p)});
  return a;
}

std::string weights_of(const DeploySetup& s) {
  for (size_t i = 0; i + 1 < s.model_cli.size(); ++i)
    if (s.model_cli[i] == "--weights") return s.model_cli[i + 1];
  return s.weights_dir;
}

// Starts the process and waits for its end, polling the sandbox's limits; the wall time is this process's.
Measured wait_timed(base::Sandbox& box, const DeploySetup& s, const fs::path& log, const fs::path& frames) {
  Measured m;
  const auto t0 = Clock::now();
  box.start();
  while (box.poll()) {
    if (s.stop && s.stop()) {
      box.kill("the run was interrupted");
      m.why = "interrupted";
      return m;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  m.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int st = box.exit_status();
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    m.why = "generate failed (" + box.ended_how() + ", " + log.string() + "): " + runtime::last_log_line(log.string());
    return m;
  }
  try {
    m.frames_sha256 = gates::frames_sha256(runtime::read_png_frames(frames.string()));
  } catch (const Error& e) {
    m.why = std::string("generate wrote no clip: ") + e.what();
  }
  return m;
}

// `generate --manifest` of `manifest` making the clip `repeat` times, in a fresh folder of its own (`folder`):
// in the plugin sandbox with `plugin_copy`, else a plain process.
Measured run_measured(const DeploySetup& s, const gates::Manifest& manifest, const std::string& plugin_copy,
                      const fs::path& folder, int64_t repeat) {
  fs::create_directories(folder / "workspace");
  fs::permissions(folder / "workspace", fs::perms::all);
  gates::PluginProcess p;
  p.binary = s.binary;
  p.workspace = (folder / "workspace").string();
  p.weights_dir = weights_of(s);
  p.plugin_copy = plugin_copy;
  p.cuda = !s.cuda_visible.empty();
  p.cuda_visible = s.cuda_visible;
  p.unsandboxed = plugin_copy.empty();
  gates::write_file_atomic((folder / "workspace" / "manifest.json").string(), gates::to_json(manifest).dump(2) + "\n");
  const std::string inside = gates::plugin_process_folder(p, p.workspace);
  std::vector<std::string> argv = {gates::plugin_process_binary(p), "generate"};
  for (const auto& a : model_args(s, p)) argv.push_back(a);
  argv.insert(argv.end(), {"--manifest", inside + "/manifest.json", "--prompt", s.prompt.text, "--seed",
                           std::to_string(s.seed), "--repeat", std::to_string(repeat), "--threads",
                           std::to_string(s.threads), "--frames-dir", inside + "/frames", "--quiet"});
  if (!plugin_copy.empty()) argv.insert(argv.end(), {"--plugin", gates::plugin_process_plugin(p)});
  const fs::path log = folder / "generate.log";
  base::Sandbox box(gates::plugin_process_spec(p, argv, log.string()));
  return wait_timed(box, s, log, folder / "workspace" / "frames");
}

// One side's time per clip from outside: (T(1 + repeat) - T(1)) / repeat; both processes' clips hashed.
Measured measure_side(const DeploySetup& s, const gates::Manifest& m, const std::string& plugin_copy,
                      const fs::path& dir, const std::string& tag) {
  const int64_t extra = std::max<int64_t>(1, s.repeat);
  const Measured once = run_measured(s, m, plugin_copy, dir / (tag + "-once"), 1);
  if (!once.why.empty()) return once;
  Measured more = run_measured(s, m, plugin_copy, dir / (tag + "-more"), 1 + extra);
  if (!more.why.empty()) return more;
  if (more.frames_sha256 != once.frames_sha256) more.frames_sha256 = "";  // two processes, two clips
  more.wall_s = (more.wall_s - once.wall_s) / static_cast<double>(extra);
  if (!(more.wall_s > 0))
    more.why = "the process making the clip " + std::to_string(1 + extra) + " times was not slower than the one " +
               "making it once: the noise is larger than a clip, nothing to time";
  return more;
}

}  // namespace

DeployResult plugin_deploy_check(const DeploySetup& s, const gates::Manifest& tier, const std::string& plugin_file,
                                 const DeployExpectation& e) {
  DeployResult r;
  if (const std::string why = base::sandbox_unavailable_reason(); !why.empty()) {
    r.not_run = "the tier runs plugin " + tier.plugin.substr(0, 12) + ", which runs only in an OS sandbox, and this " +
                "machine has none (" + why + "): run generate --plugin tiers/" + tier.plugin + ".so yourself";
    return r;
  }
  const fs::path dir(s.dir);
  fs::create_directories(dir / "plugin");
  const std::string copy = gates::copy_plugin(plugin_file, tier.plugin, (dir / "plugin").string());
  r.how = "the tier's generate in the plugin sandbox; clips hashed from its PNG frames and times per clip taken " +
          std::string("from outside, (T(1 + ") + std::to_string(std::max<int64_t>(1, s.repeat)) +
          " clips) - T(1 clip)) / " + std::to_string(std::max<int64_t>(1, s.repeat)) + ", for both sides";
  return run_deploy_pairs(
      s, e,
      [&](bool is_tier, int64_t i) {
        const Measured m = measure_side(s, is_tier ? tier : s.baseline, is_tier ? copy : "", dir,
                                        (is_tier ? "tier-" : "baseline-") + std::to_string(i));
        return DeploySide{m.wall_s, m.frames_sha256 == (is_tier ? e.clip_sha256 : e.baseline_sha256), m.why};
      },
      r);
}

}  // namespace autooptim::orchestrator
