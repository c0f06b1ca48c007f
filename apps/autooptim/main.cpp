// autooptim: makes video diffusion inference fast and proves it. Thin entry point: parses the command
// line, dispatches to one subcommand, maps exceptions to one message and a non-zero exit.
#include <c10/util/Exception.h>

#include <exception>
#include <iostream>
#include <memory>
#include <new>

#include "cli_help.h"
#include "base/crash_report.h"
#include "commands.h"
#include "runtime/build_info.h"
#include "base/error.h"
#include "base/log.h"
#include "base/process_allocator.h"

namespace autooptim::app {
int& exit_status() {
  static int status = 0;
  return status;
}
std::vector<std::string>& command_line() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace autooptim::app

int main(int argc, char** argv) {
  namespace log = autooptim::log;
  autooptim::runtime::settle_allocator();  // before any work: every subcommand allocates alike
  log::init_from_env();
  autooptim::app::command_line().assign(argv, argv + argc);
  CLI::App app{"autooptim: finds faster configurations of video diffusion inference and proves them", "autooptim"};
  app.require_subcommand(1);
  app.formatter(std::make_shared<autooptim::app::PlainFormatter>());  // before the subcommands: they inherit it
  // --version: the flavour (CPU/CUDA), the library versions and the commit, not just a number.
  app.set_version_flag("--version", [] {
    std::string t = autooptim::runtime::build_info_text();
    return t.substr(0, t.size() - 1);  // CLI11 adds the last newline
  });
  // Logging flags are accepted before or after the subcommand; they override AUTOOPTIM_LOG_LEVEL.
  app.fallthrough();
  app.add_flag_callback(
      "--quiet,-q", [] { log::set_quiet(true); }, "Warnings and errors only, no progress lines");
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& s) {
           log::Level l;
           if (log::parse_level(s, &l)) log::set_level(l);
         },
         "trace, debug, info, warn, error or off (default info, or AUTOOPTIM_LOG_LEVEL)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error", "off"}));
  autooptim::app::add_run(app);
  autooptim::app::add_generate(app);
  autooptim::app::add_gate(app);
  autooptim::app::add_bench(app);
  autooptim::app::add_verify(app);
  autooptim::app::add_executor(app);
  autooptim::app::add_worker(app);
  autooptim::app::add_techniques(app);
  autooptim::app::add_train(app);
  autooptim::app::add_eval_tiny(app);
  autooptim::app::add_compare(app);
  autooptim::app::add_sandbox_init(app);
  autooptim::app::add_agent(app);
  autooptim::app::add_help(app);
  autooptim::base::install_crash_report();  // a fault names where it happened (base/crash_report.h)
  // Bare `autooptim`: the help, not an error.
  if (argc == 1) {
    std::cout << app.help();
    return 0;
  }
  if (const auto why = autooptim::app::unknown_command(app, autooptim::app::command_line())) {
    std::cerr << "autooptim: error: " << *why << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    std::cerr << "autooptim: error: " << autooptim::app::extras_message(app) << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const autooptim::Error& e) {
    std::cerr << "autooptim: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "autooptim: error: out of memory\n";
    return 2;
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    const bool oom = msg.find("out of memory") != std::string::npos;
    std::cerr << "autooptim: error: " << (oom ? "out of memory: " : "libtorch: ") << msg << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "autooptim: error: " << e.what() << "\n";
    return 2;
  }
  return autooptim::app::exit_status();
}
