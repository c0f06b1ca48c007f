#include "cli_help.h"

#include <algorithm>
#include <iostream>
#include <memory>

#include "base/edit_distance.h"

namespace autooptim::app {
namespace {

using runtime::edit_distance;

// "INT:integer in [1, 256]" -> "INT"; "TEXT:{a,b}" -> "{a,b}"; "INT:value in {auto->-1,off->0} OR {-1,0}" ->
// "{auto,off}".
std::string plain_type(const std::string& type) {
  const auto colon = type.find(':');
  if (colon == std::string::npos) return type;
  const std::string base = type.substr(0, colon), rest = type.substr(colon + 1);
  const auto open = rest.find('{'), close = rest.find('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return base;
  const std::string set = rest.substr(open + 1, close - open - 1);
  if (set.find("->") == std::string::npos) return base.front() == '[' ? base + " {" + set + "}" : "{" + set + "}";
  std::string keys;  // a mapping: its names are what the user types
  size_t at = 0;
  while (at < set.size()) {
    const auto comma = std::min(set.find(',', at), set.size());
    const std::string item = set.substr(at, comma - at);
    keys += (keys.empty() ? "" : ",") + item.substr(0, item.find("->"));
    at = comma + 1;
  }
  return "{" + keys + "}";
}

std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

bool is_global_option_with_value(const std::string& a) { return a == "--log-level"; }

}  // namespace

PlainFormatter::PlainFormatter() { column_width(34); }

std::string PlainFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  std::string s = CLI::Formatter::make_option_name(opt, is_positional);
  for (auto b = s.find('{'); b != std::string::npos; b = s.find('{')) {  // "--no-precision-floor{false}"
    const auto e = s.find('}', b);
    if (e == std::string::npos) break;
    s.erase(b, e - b + 1);
  }
  return s;
}

std::string PlainFormatter::make_option_opts(const CLI::Option* opt) const {
  std::string out;
  if (opt->get_type_size() != 0) {
    if (!opt->get_type_name().empty()) out += " " + plain_type(opt->get_type_name());
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    if (opt->get_required()) out += " (required)";
  }
  return out;
}

std::string PlainFormatter::make_option_desc(const CLI::Option* opt) const {
  std::string d = opt->get_description();
  if (opt->get_type_size() != 0 && !opt->get_default_str().empty()) d += " (default: " + opt->get_default_str() + ")";
  return d;
}

void add_help(CLI::App& app) {
  auto topic = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("help", "Show this help, or one command's: autooptim help run");
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands({})) names.push_back(s->get_name());
  cmd->add_option("command", *topic, "The command whose options to show")->check(CLI::IsMember(names));
  cmd->callback([&app, topic] {
    if (topic->empty())
      std::cout << app.help();
    else
      std::cout << app.get_subcommand(*topic)->help(app.get_name());
  });
}

std::string closest_name(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, typed.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(typed, c);
    if (d < best_d) best = c, best_d = d;
  }
  return best;
}

std::optional<std::string> unknown_command(const CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands({})) names.push_back(s->get_name());
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (is_global_option_with_value(a)) {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;  // a global option; the parser judges it
    if (std::find(names.begin(), names.end(), a) != names.end()) return std::nullopt;
    const std::string near = closest_name(a, names);
    return "unknown command '" + a + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
           " (autooptim help lists the commands)";
  }
  return std::nullopt;
}

std::string extras_message(const CLI::App& app) {
  const CLI::App* cmd = &app;
  for (const CLI::App* s : app.get_subcommands()) cmd = s;
  const std::vector<std::string> extras = app.remaining(true);  // the command's and the tool's leftovers
  const std::string where = cmd == &app ? "autooptim" : "autooptim " + cmd->get_name();
  const std::string help = cmd == &app ? "autooptim help" : "autooptim help " + cmd->get_name();
  for (const auto& a : extras) {
    if (a.size() < 2 || a[0] != '-') continue;
    const std::string name = a.substr(0, a.find('='));
    const std::string near = closest_name(name, option_names(*cmd));
    return where + ": unknown option " + name + (near.empty() ? "" : "; did you mean " + near + "?") + " (" + help +
           " lists the options)";
  }
  std::string words;
  for (const auto& a : extras) words += (words.empty() ? "" : " ") + a;
  return where + ": unexpected argument(s): " + words + " (" + help + " lists what it takes)";
}

}  // namespace autooptim::app
