// Helpers of the tests/dist suites: run `mpirun -np N --oversubscribe ...`
// (or a plain command) as a subprocess and collect its output and exit code;
// compare a spread model with one rank on every fixture (dist_tp_check
// compare); check that a dead or stopped rank ends the job.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
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

// The fixture architectures the suites compare: GQA with fewer KV heads than
// ranks (mistral), biases and tied embeddings (qwen2), tied embeddings,
// sandwich norms, softcaps and sliding layers (gemma3), qk-norm (qwen3), GGUF,
// FP8 checkpoints (per-channel weight scales and biases: qwen2_fp8_channel;
// per-tensor scales, static input scales and KV cache scales:
// llama3_fp8_static), whose scales are sliced with their weights.
inline const std::string kFixtureModels[] = {"llama3",
                                             "mistral",
                                             "qwen2",
                                             "gemma3",
                                             "qwen3",
                                             "llama3_gguf",
                                             "gemma3_gguf",
                                             "qwen2_fp8_channel",
                                             "llama3_fp8_static"};

// One mpirun of `dist_tp_check compare FLAGS` over every fixture (start-up
// dominates): model -> its JSON line.
inline std::map<std::string, nlohmann::json> compare_fixtures(const std::string& flags, int np) {
  std::string args = std::string(LOOM_TP_CHECK) + " compare " + flags;
  for (const std::string& m : kFixtureModels) args += " " + m;
  const ProcessRun r = mpirun(args, "", 120, np);
  std::map<std::string, nlohmann::json> out;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("model")) out[j["model"].get<std::string>()] = j;
  }
  if (r.exit_code != 0 || out.size() != std::size(kFixtureModels))
    ADD_FAILURE() << "mpirun -np " << np << " exited " << r.exit_code << ":\n" << r.output;
  return out;
}

// `model`'s logits within 1e-4 of one rank's (relative to the largest logit)
// and the same greedy tokens.
inline void expect_matches_one_rank(const std::map<std::string, nlohmann::json>& results,
                                    const std::string& model) {
  const auto it = results.find(model);
  ASSERT_NE(it, results.end()) << "no result for " << model;
  const nlohmann::json& j = it->second;
  std::printf("%s\n", j.dump().c_str());
  EXPECT_LE(j["max_rel"].get<double>(), 1e-4) << j.dump();
  EXPECT_TRUE(j["same_tokens"].get<bool>()) << j.dump();
}

// `dist_tp_check die FLAGS llama3`: rank 1 is killed; the job must end
// non-zero within seconds.
inline void expect_killed_rank_ends_job(const std::string& flags) {
  const ProcessRun r =
      mpirun(std::string(LOOM_TP_CHECK) + " die " + flags + " llama3", "LOOM_DIST_TIMEOUT_S=3");
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find("never stopped"), std::string::npos);
  // ~4 s here; well under the 60 s a collective waits by default, with room
  // for mpirun's start-up on a loaded machine or a sanitizer build.
  EXPECT_LT(r.seconds, 40.0);
}

// `dist_tp_check stall FLAGS llama3`: rank 1 is stopped; a peer's transfer
// must time out after 2 s and end the job.
inline void expect_stopped_rank_times_out(const std::string& flags) {
  const ProcessRun r =
      mpirun(std::string(LOOM_TP_CHECK) + " stall " + flags + " llama3", "LOOM_DIST_TIMEOUT_S=2");
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("did not complete within 2.0 s: a peer rank died or is stuck"),
            std::string::npos);
  EXPECT_LT(r.seconds, 40.0);  // as above
}

}  // namespace loom::testing
