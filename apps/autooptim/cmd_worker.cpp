// autooptim worker: one process per device that loads the model once and serves the run's trials,
// screens and gate runs through the run folder (docs/workers.md). Started by `run` (the local
// launcher) or by any other launcher (a Slurm job array).
#include <filesystem>
#include <memory>

#include "commands.h"
#include "model_args.h"
#include "base/error.h"
#include "workers/generation_server.h"
#include "workers/server.h"

namespace autooptim::app {

void add_worker(CLI::App& app) {
  auto model = std::make_shared<ModelArgs>();
  auto o = std::make_shared<workers::ServeOptions>();
  auto g = std::make_shared<workers::GenerationServerOptions>();
  auto* cmd = app.add_subcommand(
      "worker", "Load the model once and serve a run folder's requests (started by run, or by a launcher)");
  model->add_to(cmd);
  cmd->add_option("--serve", o->run_dir, "The run folder whose queue this worker serves");
  cmd->add_option("--worker-id", o->worker_id, "Unique name in the run (gpu0, cpu1, slurm-123-4)");
  cmd->add_option("--generation-channel", g->channel,
                  "Instead of a run folder: serve one gate's generations through the FIFOs of this folder (the "
                  "sandboxed worker a gate starts for a technique plugin)")
      ->excludes("--serve");
  cmd->add_option("--plugin", g->plugins, "With --generation-channel: load this technique plugin first")
      ->needs("--generation-channel");
  cmd->add_option("--threads", o->threads, "CPU threads (0: libtorch's default)")->check(int_in(0, 4096));
  cmd->add_option("--idle-exit", o->idle_exit_s, "Leave after this many seconds without a request (0: never)")
      ->check(number_in(0, 1e7));
  cmd->add_option("--max-requests", o->max_requests, "Leave after this many requests (0: no limit)")
      ->check(int_in(0, 1000000000));
  cmd->add_option("--trial-baselines", o->trial_baselines,
                  "A trial's baseline run of a prompt: reuse the worker's first (reuse), run it every trial (fresh), "
                  "or reuse on a CUDA device only (auto)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "reuse", "fresh"}));
  cmd->add_option("--heartbeat", o->heartbeat_s, "Seconds between heartbeats")
      ->capture_default_str()
      ->check(number_in(0.05, 60));
  cmd->callback([model, o, g] {
    if (!g->channel.empty()) {
      g->load = model->request();
      exit_status() = workers::serve_generations(*g);
      return;
    }
    if (o->run_dir.empty() || o->worker_id.empty())
      throw Error("worker: --serve RUN and --worker-id ID are required (or --generation-channel DIR)");
    o->load = model->request();
    exit_status() = workers::serve(*o);
  });
}

}  // namespace autooptim::app
