// Tensor parallelism on CPU over MPI: `mpirun -np 2` runs dist_tp_check (or
// loom itself) as a subprocess. TP=2 must give the single-rank logits within
// 1e-4 (relative to the largest logit) and the same greedy tokens on every
// fixture architecture (GQA with fewer KV heads than ranks: mistral; biases:
// qwen2; tied embeddings, sandwich norms, softcaps: gemma3; qk-norm: qwen3;
// GGUF files), and `loom generate --tensor-parallel-size 2` the same output as
// one process. A rank that dies or stops makes the job end non-zero within
// seconds, never hang.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mpi_run.h"

namespace {

using loom::testing::mpirun;
using loom::testing::ProcessRun;
using loom::testing::run_local;

const std::string kModels[] = {"llama3", "mistral",     "qwen2",      "gemma3",
                               "qwen3",  "llama3_gguf", "gemma3_gguf"};

// One mpirun for every fixture (start-up dominates): model -> its JSON line.
const std::map<std::string, nlohmann::json>& compare_results() {
  static const std::map<std::string, nlohmann::json> results = [] {
    std::string args = std::string(LOOM_TP_CHECK) + " compare";
    for (const std::string& m : kModels) args += " " + m;
    const ProcessRun r = mpirun(args);
    std::map<std::string, nlohmann::json> out;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("model")) out[j["model"].get<std::string>()] = j;
    }
    if (r.exit_code != 0 || out.size() != std::size(kModels))
      ADD_FAILURE() << "mpirun exited " << r.exit_code << ":\n" << r.output;
    return out;
  }();
  return results;
}

class TensorParallelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelTest, Tp2MatchesOneRank) {
  const auto& results = compare_results();
  const auto it = results.find(GetParam());
  ASSERT_NE(it, results.end()) << "no result for " << GetParam();
  const nlohmann::json& j = it->second;
  std::printf("%s\n", j.dump().c_str());
  EXPECT_LE(j["max_rel"].get<double>(), 1e-4) << j.dump();
  EXPECT_TRUE(j["same_tokens"].get<bool>()) << j.dump();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return info.param; });

TEST(TensorParallelCli, GenerateMatchesOneProcess) {
  const std::string model = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/mistral";
  const std::string flags =
      " generate --model " + model +
      " --prompt-ids 1,2,3,4,5,6,7 --max-tokens 16 --temperature 0 --json --kv-cache-memory 8MiB "
      "--threads 1";
  const ProcessRun one = run_local(std::string(LOOM_BINARY) + flags);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const ProcessRun two = mpirun(std::string(LOOM_BINARY) + flags + " --tensor-parallel-size 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find(one.output), std::string::npos)
      << "one rank: " << one.output << "two ranks: " << two.output;
}

TEST(TensorParallelCli, RefusesWrongRankCount) {
  const std::string model = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/mistral";
  const ProcessRun r =
      mpirun(std::string(LOOM_BINARY) + " generate --model " + model +
             " --prompt-ids 1,2 --max-tokens 2 --kv-cache-memory 8MiB --tensor-parallel-size 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--tensor-parallel-size 4 but the MPI job has 2 ranks"),
            std::string::npos)
      << r.output;
}

TEST(DeadRank, KilledRankEndsTheJob) {
  const ProcessRun r = mpirun(std::string(LOOM_TP_CHECK) + " die llama3", "LOOM_DIST_TIMEOUT_S=3");
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find("never stopped"), std::string::npos);
  EXPECT_LT(r.seconds, 15.0);
}

TEST(DeadRank, StoppedRankTimesOut) {
  const ProcessRun r =
      mpirun(std::string(LOOM_TP_CHECK) + " stall llama3", "LOOM_DIST_TIMEOUT_S=2");
  std::printf("exit %d after %.1f s\n%s", r.exit_code, r.seconds, r.output.c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("did not complete within 2.0 s: a peer rank died or is stuck"),
            std::string::npos);
  EXPECT_LT(r.seconds, 15.0);
}

}  // namespace
