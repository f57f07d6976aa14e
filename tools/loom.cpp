// loom: the command-line entry point. Dispatches to one subcommand per
// tools/cmd_*.cpp; each parses its own flags.
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  std::fprintf(stderr, "usage: loom <generate|tokenize|detokenize|render|bench|env> [flags]\n");
  return argc > 1 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
}
