// Helpers of the tests/dist suites: run `mpirun -np N --oversubscribe ...`
// (or a plain command) as a subprocess and collect its output and exit code.
#pragma once

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace loom::testing {

struct ProcessRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

// Runs `cmd` through the shell, collecting its stdout (and its stderr unless
// the command redirects it).
inline ProcessRun run_command(const std::string& cmd) {
  ProcessRun r;
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs `mpirun -np NP --oversubscribe ARGS` (plus `env` assignments) with a
// hard limit of `limit_s` seconds; stderr joins stdout.
inline ProcessRun mpirun(const std::string& args, const std::string& env = "", int limit_s = 60,
                         int np = 2) {
  return run_command("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + env +
                     " timeout -s KILL " + std::to_string(limit_s) + " " LOOM_MPIEXEC " -np " +
                     std::to_string(np) + " --oversubscribe " + args + " 2>&1");
}

// One process, stderr dropped (the output to compare is stdout only).
inline ProcessRun run_local(const std::string& cmd) {
  return run_command(cmd + " 2>/dev/null");
}

}  // namespace loom::testing
