// loom: the command-line entry point. Dispatches to one subcommand per
// tools/cmd_*.cpp; each parses its own flags.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <string_view>

#include "build_info.h"
#include "cli.h"
#include "core/crash_handler.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"generate", loom::cli::cmd_generate, "generate text from a prompt"},
    {"serve", loom::cli::cmd_serve, "OpenAI-compatible HTTP server"},
    {"router", loom::cli::cmd_router, "prefix-aware load balancer over loom serve replicas"},
    {"tokenize", loom::cli::cmd_tokenize, "text on stdin -> token ids"},
    {"detokenize", loom::cli::cmd_detokenize, "token ids on stdin -> text"},
    {"render", loom::cli::cmd_render, "chat messages JSON on stdin -> prompt text"},
    {"bench", loom::cli::cmd_bench, "benchmarks: latency, offline, serve, workload"},
    {"env", loom::cli::cmd_env, "what this machine and build offer"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: loom <command> [flags]   (loom <command> --help for its flags)\n");
  std::fprintf(out, "       loom --version\n\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-11s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  loom::install_crash_handler();  // a fatal signal prints the faulting stack
  // Logs go to stderr so stdout carries only results (JSON, text, ids).
  spdlog::set_default_logger(spdlog::stderr_color_mt("loom"));
  spdlog::set_level(spdlog::level::warn);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "-V") == 0) {
    std::printf("%s\n", loom::cli::build_info_line().c_str());
    return 0;
  }
  for (const auto& c : kCommands)
    if (std::string_view(argv[1]) == c.name) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "loom: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
