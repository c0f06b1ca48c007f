#include "gates/plugin_sandbox.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "base/sha256.h"

namespace autooptim::gates {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInsideBin = "/opt/autooptim/bin";
constexpr const char* kInsideWeights = "/weights";
constexpr const char* kInsidePluginDir = "/plugin";

// The GPU's device nodes, for a process on a CUDA device.
std::vector<std::string> gpu_devices() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("nvidia", 0) == 0 && fs::is_character_file(e.path(), ec)) out.push_back(e.path().string());
  }
  return out;
}

std::vector<std::string> environment(const PluginProcess& p) {
  const std::string home = plugin_process_folder(p, p.workspace);
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "LANG=C.UTF-8",
                                  // Idle compute threads sleep at once: the gate counts the worker's CPU time
                                  // outside its windows, and a spinning pool would look like work.
                                  "OMP_WAIT_POLICY=PASSIVE", "AUTOOPTIM_GENERATION_WORKER=1"};
  // This process's settings, then the worker's own device where it has one.
  std::string cuda_visible = p.cuda_visible;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && cuda_visible.empty()) cuda_visible = v;
  for (const char* k : {"OMP_NUM_THREADS", "LD_LIBRARY_PATH", "AUTOOPTIM_LOG"})
    if (const char* v = std::getenv(k)) env.push_back(std::string(k) + "=" + v);
  if (!cuda_visible.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + cuda_visible);
  if (p.unsandboxed) env.push_back("TMPDIR=" + home);
  return env;
}

// The autooptim binary the process runs: the one named, else this process's own.
std::string binary_of(const PluginProcess& p) { return p.binary.empty() ? "/proc/self/exe" : p.binary; }

}  // namespace

std::string copy_plugin(const std::string& file, const std::string& sha256, const std::string& dir) {
  const fs::path copy = fs::path(dir) / (sha256 + ".so");
  fs::copy_file(file, copy, fs::copy_options::overwrite_existing);
  fs::permissions(copy, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  if (sha256_file_hex(copy.string()) != sha256) throw Error("the plugin " + file + " changed while copied");
  return copy.string();
}

std::string plugin_process_binary(const PluginProcess& p) {
  const fs::path exe = fs::canonical(binary_of(p));
  return p.unsandboxed ? exe.string() : std::string(kInsideBin) + "/" + exe.filename().string();
}

std::string plugin_process_weights(const PluginProcess& p) {
  if (p.weights_dir.empty()) return "";
  return p.unsandboxed ? p.weights_dir : kInsideWeights;
}

std::string plugin_process_plugin(const PluginProcess& p) {
  if (p.plugin_copy.empty()) return "";
  return p.unsandboxed ? p.plugin_copy
                       : std::string(kInsidePluginDir) + "/" + fs::path(p.plugin_copy).filename().string();
}

std::string plugin_process_folder(const PluginProcess& p, const std::string& host_folder) {
  if (p.unsandboxed) return host_folder;
  return host_folder == p.channel && !p.channel.empty() ? "/channel" : "/workspace";
}

base::SandboxSpec plugin_process_spec(const PluginProcess& p, std::vector<std::string> argv, std::string log_file) {
  base::SandboxSpec s;
  if (!p.unsandboxed) {
    if (!p.plugin_copy.empty()) s.ro_binds.push_back({p.plugin_copy, plugin_process_plugin(p)});
    if (!p.weights_dir.empty()) s.ro_binds.push_back({fs::canonical(p.weights_dir).string(), kInsideWeights});
    for (const auto& b : base::binary_binds(binary_of(p), kInsideBin)) s.ro_binds.push_back(b);
    if (p.cuda) {
      s.devices = gpu_devices();
      s.ro_binds.push_back({"/sys", "/sys"});  // the CUDA driver reads the device's topology there
    }
  }
  s.unsandboxed = p.unsandboxed;
  s.workspace = p.workspace;
  s.channel = p.channel;
  s.argv = std::move(argv);
  s.env = environment(p);
  s.log_file = std::move(log_file);
  s.limits.processes = 4096;  // RLIMIT_NPROC counts threads: libtorch's and the CUDA driver's
  s.limits.memory_bytes = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE) * 9 / 10;
  s.limits.address_space_bytes = -1;  // CUDA reserves far more address space than it uses
  s.limits.cpus = 0;
  s.limits.file_bytes = 1LL << 30;
  s.uid_when_root = p.uid_when_root;
  return s;
}

}  // namespace autooptim::gates
