// Shared pieces of the `loom` subcommands: each cmd_*.cpp defines one
// `int cmd_NAME(int argc, char** argv)` (argv[0] is the subcommand name).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loom::cli {

int cmd_generate(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_render(int argc, char** argv);
int cmd_env(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_bench_serve(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_router(int argc, char** argv);

// Runs body, turning loom::Error and other exceptions into one line on
// stderr ("loom NAME: error: ...") and exit code 1.
int guarded(const char* name, const std::function<int()>& body);

std::string read_stdin();
// Parses "1,2,3", "1 2 3" or a JSON array of ints; throws loom::Error.
std::vector<int32_t> parse_id_list(const std::string& text);

}  // namespace loom::cli
