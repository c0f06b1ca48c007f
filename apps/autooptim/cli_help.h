#pragma once
// The command line's help and its mistakes: help written for a reader (plain types and defaults, options in
// groups), `autooptim help [COMMAND]`, help for a bare `autooptim`, and a did-you-mean for a mistyped command
// or option instead of the parser's own message.
#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace autooptim::app {

// Help text without the parser's internals: "INT" or "{auto,off,on}" instead of the validator's
// description, "(default: 2)" after the description, no "{false}" in a flag's name.
class PlainFormatter : public CLI::Formatter {
 public:
  PlainFormatter();
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
};

// `autooptim help [COMMAND]`: the whole tool's help, or one command's.
void add_help(CLI::App& app);

// The closest of `candidates` to `typed` within a few edits ("" when none is close).
std::string closest_name(const std::string& typed, const std::vector<std::string>& candidates);

// A message for a command line the parser would refuse with its own words: the first word that is neither a
// global option nor a command ("unknown command 'rnu'; did you mean 'run'?"). nullopt when none.
std::optional<std::string> unknown_command(const CLI::App& app, const std::vector<std::string>& args);

// After an ExtrasError: the first unknown option or argument of the command that was parsed, with the
// closest option name ("run: unknown option --modle; did you mean --model?").
std::string extras_message(const CLI::App& app);

}  // namespace autooptim::app
