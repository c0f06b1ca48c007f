#pragma once
// Levelled logging (spdlog underneath, kept out of this header) and the progress line. On a terminal
// the progress line is redrawn in place; anywhere else (a CI log, a Slurm output file) progress is a
// plain timestamped line per event, or at most one every few seconds for a state that keeps changing,
// so a long run's stderr stays a readable file of short lines.
#include <chrono>
#include <mutex>
#include <string>

namespace autooptim::log {

enum class Level { trace, debug, info, warn, error, off };

// "trace", "debug", "info", "warn"/"warning", "error", "off"; false for anything else.
bool parse_level(const std::string& name, Level* out);
const char* level_name(Level level);

// Start-up: AUTOOPTIM_LOG_LEVEL (a level name) sets the level, NO_COLOR turns colours off, and
// AUTOOPTIM_PROGRESS_SECONDS sets how often a progress line is printed off a terminal (default 30).
// Command-line flags applied afterwards (set_level, set_quiet) take precedence over the environment.
void init_from_env();
void set_level(Level level);
Level level();
// --quiet: warnings and errors only, and no progress.
void set_quiet(bool quiet);
bool enabled(Level level);

// True when stderr is a terminal (and not overridden by AUTOOPTIM_TTY=0/1, for tests and pipes).
bool stderr_is_tty();
bool color_enabled();
double progress_interval_s();

void trace(const std::string& msg);
void debug(const std::string& msg);
void info(const std::string& msg);
void warn(const std::string& msg);
void error(const std::string& msg);

// A changing state shown on one line. update() redraws it on a terminal; off a terminal it prints a
// plain line when the state's key (the part that names a phase: a new phase is an event) changed, or
// when progress_interval_s() passed since the last printed line. event() always prints one line.
class Progress {
 public:
  Progress();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // key: what changes rarely (a phase, a stage); detail: what changes all the time (counters, times).
  void update(const std::string& key, const std::string& detail);
  void event(const std::string& msg);
  // Clears the live line (a terminal), so what follows starts on a fresh line.
  void clear();

 private:
  std::mutex mu_;
  std::string last_key_;
  std::chrono::steady_clock::time_point last_print_{};
  bool printed_ = false;
};

}  // namespace autooptim::log
