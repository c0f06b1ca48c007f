#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace autooptim::log {
namespace {

struct State {
  std::mutex mu;  // guards the live line and the logger's output order
  std::atomic<Level> level{Level::info};
  bool quiet = false;
  bool tty = false;
  bool color = false;
  double interval_s = 30.0;
  std::string live;  // what the terminal shows on its last line now (empty: nothing)
  std::shared_ptr<spdlog::logger> logger;
};

State& state() {
  static State s;
  return s;
}

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::trace:
      return spdlog::level::trace;
    case Level::debug:
      return spdlog::level::debug;
    case Level::info:
      return spdlog::level::info;
    case Level::warn:
      return spdlog::level::warn;
    case Level::error:
      return spdlog::level::err;
    case Level::off:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// Built on first use with the settings of that moment (init_from_env runs first in the binary).
spdlog::logger& logger() {
  State& s = state();
  if (!s.logger) {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(s.color ? spdlog::color_mode::always
                                                                              : spdlog::color_mode::never);
    s.logger = std::make_shared<spdlog::logger>("autooptim", sink);
    // A terminal gets short lines; a file gets full timestamps (CI logs are read after the fact).
    s.logger->set_pattern(s.tty ? "[%H:%M:%S] %^%l%$ %v" : "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    s.logger->set_level(spdlog::level::trace);
    s.logger->flush_on(spdlog::level::trace);
  }
  return *s.logger;
}

void draw_live_locked(State& s) {
  if (s.live.empty()) return;
  std::fprintf(stderr, "\r\033[K%s", s.live.c_str());
  std::fflush(stderr);
}

void erase_live_locked(State& s) {
  if (s.live.empty()) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void emit(Level l, const std::string& msg) {
  if (!enabled(l)) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  erase_live_locked(s);
  logger().log(to_spd(l), "{}", msg);
  draw_live_locked(s);
}

}  // namespace

bool parse_level(const std::string& name, Level* out) {
  static const std::pair<const char*, Level> names[] = {
      {"trace", Level::trace},  {"debug", Level::debug}, {"info", Level::info}, {"warn", Level::warn},
      {"warning", Level::warn}, {"error", Level::error}, {"off", Level::off}};
  for (const auto& [n, l] : names)
    if (name == n) {
      *out = l;
      return true;
    }
  return false;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::trace:
      return "trace";
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warn";
    case Level::error:
      return "error";
    case Level::off:
      return "off";
  }
  return "info";
}

void init_from_env() {
  State& s = state();
  const char* forced = std::getenv("AUTOOPTIM_TTY");
  s.tty = forced ? std::string(forced) == "1" : ::isatty(STDERR_FILENO) == 1;
  // https://no-color.org: any non-empty NO_COLOR turns colour off.
  const char* nc = std::getenv("NO_COLOR");
  s.color = s.tty && !(nc && *nc);
  if (const char* lv = std::getenv("AUTOOPTIM_LOG_LEVEL")) {
    Level l;
    if (parse_level(lv, &l))
      s.level = l;
    else
      std::fprintf(stderr,
                   "autooptim: warning: AUTOOPTIM_LOG_LEVEL='%s' is not a level (trace, debug, info, warn, error, "
                   "off); using info\n",
                   lv);
  }
  if (const char* iv = std::getenv("AUTOOPTIM_PROGRESS_SECONDS")) {
    char* end = nullptr;
    const double v = std::strtod(iv, &end);
    if (end != iv && v >= 0) s.interval_s = v;
  }
  s.logger.reset();
}

void set_level(Level l) { state().level = l; }
Level level() { return state().level; }
void set_quiet(bool q) {
  state().quiet = q;
  if (q && state().level.load() < Level::warn) state().level = Level::warn;
}
bool enabled(Level l) { return l != Level::off && l >= state().level.load(); }
bool stderr_is_tty() { return state().tty; }
bool color_enabled() { return state().color; }
double progress_interval_s() { return state().interval_s; }

void trace(const std::string& m) { emit(Level::trace, m); }
void debug(const std::string& m) { emit(Level::debug, m); }
void info(const std::string& m) { emit(Level::info, m); }
void warn(const std::string& m) { emit(Level::warn, m); }
void error(const std::string& m) { emit(Level::error, m); }

Progress::Progress() = default;
Progress::~Progress() { clear(); }

void Progress::update(const std::string& key, const std::string& detail) {
  if (!enabled(Level::info)) return;
  State& s = state();
  const std::string text = detail.empty() ? key : key + "  " + detail;
  if (s.tty) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.live = text;
    draw_live_locked(s);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const bool new_key = !printed_ || key != last_key_;
  if (!new_key && std::chrono::duration<double>(now - last_print_).count() < s.interval_s) return;
  last_key_ = key;
  last_print_ = now;
  printed_ = true;
  emit(Level::info, text);
}

void Progress::event(const std::string& msg) { emit(Level::info, msg); }

void Progress::clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  erase_live_locked(s);
  s.live.clear();
}

}  // namespace autooptim::log
