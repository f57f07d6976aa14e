// The command-line conventions every `loom` subcommand shares: each flag's
// default shown in --help, and an unknown flag named with the closest known
// one ("did you mean --max-model-len?"). Implemented in cmd_common.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace loom::cli {

// Call on a new App before adding options: --help then shows every option's
// default (its value when added), and lists flags in a wider column.
void show_defaults(CLI::App& app);

// Parses argv (argv[0] is the subcommand) into `app`. nullopt: go on; else
// the process exit code (0 after --help; 2 after a usage error, printed on
// stderr with a suggestion for a mistyped flag).
std::optional<int> parse_args(CLI::App& app, int argc, char** argv);

// The known flag of `app` closest to `unknown` (edit distance), or "" when
// none is close enough to be a plausible typo.
std::string closest_flag(const CLI::App& app, const std::string& unknown);

}  // namespace loom::cli

// Parses or returns the exit code from the calling function.
#define LOOM_PARSE(app, argc, argv)                                                 \
  do {                                                                              \
    if (auto loom_rc_ = ::loom::cli::parse_args(app, argc, argv)) return *loom_rc_; \
  } while (0)
