#include "workers/generation_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "gates/generation_wire.h"
#include "gates/manifest.h"
#include "gates/worker.h"
#include "runtime/plugin.h"
#include "runtime/techniques/registry.h"

namespace autooptim::workers {

using nlohmann::json;

namespace {

struct Server {
  const GenerationServerOptions& o;
  std::string plugin;  // the sha256 of the (last) plugin loaded
  std::unique_ptr<gates::Worker> worker;

  json describe() const {
    json ts = json::array();
    for (const auto& t : runtime::techniques::all()) {
      if (t.plugin.empty() || t.plugin != plugin) continue;
      json j = t.to_json({});
      j["group"] = t.group;
      ts.push_back(std::move(j));
    }
    return {{"ok", true}, {"plugin", plugin}, {"techniques", ts}};
  }

  json load() {
    const auto t0 = std::chrono::steady_clock::now();
    if (!worker) worker = std::make_unique<gates::Worker>(o.load);
    return {{"ok", true},
            {"plugin", plugin},
            {"load_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
  }

  // One generation; its clip follows the header.
  void run(const json& req, int out_fd) {
    if (!worker) throw Error("a run before the model was loaded");
    const gates::Manifest m = gates::parse_manifest(req.at("manifest"), "the gate's manifest");
    gates::Prompt p;
    p.id = "request";
    p.text = req.at("text").get<std::string>();
    const gates::RunOutput r = worker->run(m, p, req.at("seed").get<int64_t>());
    if (!r.error.empty()) {
      gates::write_message(out_fd, {{"ok", false}, {"error", r.error}});
      return;
    }
    gates::write_message(out_fd,
                         {{"ok", true},
                          {"worker_seconds", r.seconds},
                          {"pre_sync_s", r.pre_sync_s},
                          {"trace", r.trace.to_json()},
                          {"times", gates::stage_times_to_json(r.times)}},
                         r.video.contiguous());
  }
};

int open_fifo(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path);
  return fd;
}

}  // namespace

int serve_generations(const GenerationServerOptions& o) {
  int in = -1, out = -1;
  try {
    in = open_fifo(o.channel + "/requests", O_RDONLY);
    out = open_fifo(o.channel + "/answers", O_WRONLY);
  } catch (const Error& e) {
    std::fprintf(stderr, "autooptim worker: %s\n", e.what());
    return 2;
  }
  Server s{o, "", nullptr};
  try {
    for (const auto& p : o.plugins) s.plugin = runtime::load_plugin(p).sha256;
  } catch (const Error& e) {
    gates::write_message(out, {{"ok", false}, {"error", e.what()}});
    return 2;
  }
  for (;;) {
    gates::WireMessage req;
    try {
      req = gates::read_message(in, {}, nullptr);
    } catch (const Error& e) {
      std::fprintf(stderr, "autooptim worker: %s\n", e.what());
      return 0;  // the gate is gone
    }
    const std::string kind = req.header.value("kind", std::string());
    if (kind == "stop") return 0;
    try {
      if (kind == "hello") {
        gates::write_message(out, {{"ok", true}, {"plugin", s.plugin}});
      } else if (kind == "describe") {
        gates::write_message(out, s.describe());
      } else if (kind == "load") {
        gates::write_message(out, s.load());
      } else if (kind == "run") {
        s.run(req.header, out);
      } else {
        gates::write_message(out, {{"ok", false}, {"error", "unknown request '" + kind + "'"}});
      }
    } catch (const std::exception& e) {
      gates::write_message(out, {{"ok", false}, {"error", e.what()}});
    }
  }
}

}  // namespace autooptim::workers
