// autooptim compare OLD/report.json NEW/report.json: the nightly sweep's question, "did anything get
// slower or worse since last night?". Exit 0 no regression, 1 a regression beyond the reports' recorded
// noise, 2 bad input (a missing file, not JSON, not a report, reports of different models).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "base/atomic_file.h"
#include "orchestrator/compare.h"

namespace autooptim::app {

void add_compare(CLI::App& app) {
  struct Args {
    std::string old_path, new_path, json_out;
    orchestrator::CompareOptions opt;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("compare",
                                 "Per tier the change in speedup and quality between two runs' reports; exit 1 on a "
                                 "regression beyond their noise");
  cmd->add_option("old", a->old_path, "The earlier run's report.json")->required();
  cmd->add_option("new", a->new_path, "The later run's report.json")->required();
  cmd->add_option("--max-noise", a->opt.max_noise,
                  "The most timing noise a slower tier or baseline may hide in, relative (the runs' recorded spreads "
                  "added, bounded by this)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--psnr-tolerance", a->opt.psnr_tolerance_db,
                  "Worst-clip PSNR drop (dB) of a tier tolerated as numerical noise")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 200.0));
  cmd->add_option("--json", a->json_out, "Also write the comparison as JSON to this file");
  cmd->callback([a] {
    // Both files are checked before anything is printed: bad input is one message and exit 2.
    const auto o = orchestrator::load_report_for_compare(a->old_path);
    const auto n = orchestrator::load_report_for_compare(a->new_path);
    const auto c = orchestrator::compare_reports(o, n, a->opt, a->old_path, a->new_path);
    std::fputs(orchestrator::render_comparison(c).c_str(), stdout);
    if (!a->json_out.empty()) gates::write_file_atomic(a->json_out, c.result.dump(2) + "\n");
    exit_status() = c.exit_code();
  });
}

}  // namespace autooptim::app
