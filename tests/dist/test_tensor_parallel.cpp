// Tensor parallelism on CPU over MPI: `mpirun -np 2` runs dist_tp_check (or
// loom itself) as a subprocess. TP=2 must give the single-rank logits within
// 1e-4 (relative to the largest logit) and the same greedy tokens on every
// fixture architecture (GQA with fewer KV heads than ranks: mistral; biases:
// qwen2; tied embeddings, sandwich norms, softcaps: gemma3; qk-norm: qwen3;
// GGUF files; FP8 checkpoints with per-channel and per-tensor scales), and `loom generate --tensor-parallel-size 2` the same output as
// one process. A rank that dies or stops makes the job end non-zero within
// seconds, never hang.
#include <gtest/gtest.h>

#include <string>

#include "dist_test.h"

namespace {

using loom::testing::kFixtureModels;
using loom::testing::mpirun;
using loom::testing::ProcessRun;
using loom::testing::run_local;

class TensorParallelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelTest, Tp2MatchesOneRank) {
  static const auto results = loom::testing::compare_fixtures("", 2);
  loom::testing::expect_matches_one_rank(results, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelTest, ::testing::ValuesIn(kFixtureModels),
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
  loom::testing::expect_killed_rank_ends_job("");
}

TEST(DeadRank, StoppedRankTimesOut) {
  loom::testing::expect_stopped_rank_times_out("");
}

}  // namespace
