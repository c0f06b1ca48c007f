// autooptim: makes video diffusion inference fast and proves it. Thin entry point: parses the command
// line, dispatches to one subcommand, maps exceptions to one message and a non-zero exit.
#include <c10/util/Exception.h>

#include <exception>
#include <iostream>
#include <new>

#include "commands.h"
#include "runtime/error.h"

namespace autooptim::app {
int& exit_status() {
  static int status = 0;
  return status;
}
}  // namespace autooptim::app

int main(int argc, char** argv) {
  CLI::App app{"autooptim: finds faster configurations of video diffusion inference and proves them"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "autooptim 0.1.0");
  autooptim::app::add_run(app);
  autooptim::app::add_generate(app);
  autooptim::app::add_gate(app);
  autooptim::app::add_bench(app);
  autooptim::app::add_verify(app);
  autooptim::app::add_executor(app);
  autooptim::app::add_techniques(app);
  try {
    app.parse(argc, argv);
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
