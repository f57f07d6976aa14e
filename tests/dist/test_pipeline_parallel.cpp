// Pipeline parallelism on CPU over MPI: `mpirun -np 2` runs dist_tp_check (or
// loom itself) with two stages. PP=2 must give the single-rank logits within
// 1e-4 (relative to the largest logit) and the same greedy tokens on every
// fixture architecture (gemma3: sliding and global layers on both stages,
// tied embeddings on both ends; qwen2: tied embeddings and biases), with one
// and with two micro-batches a step; `loom generate --pipeline-parallel-size
// 2` must print what one process prints. A rank that dies or stops ends the
// job within seconds. PP=2 x TP=2 runs with -np 4. split_step and
// stage_layers are checked directly.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "dist_test.h"
#include "model/pipeline_parallel.h"

namespace {

using loom::testing::compare_fixtures;
using loom::testing::expect_matches_one_rank;
using loom::testing::kFixtureModels;
using loom::testing::mpirun;
using loom::testing::ProcessRun;
using loom::testing::run_local;

class PipelineParallelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineParallelTest, Pp2MatchesOneRank) {
  static const auto results = compare_fixtures("--pp 2 --micro 1", 2);
  expect_matches_one_rank(results, GetParam());
}

TEST_P(PipelineParallelTest, Pp2TwoMicroBatchesMatchesOneRank) {
  static const auto results = compare_fixtures("--pp 2 --micro 2", 2);
  expect_matches_one_rank(results, GetParam());
}

TEST_P(PipelineParallelTest, Pp2Tp2MatchesOneRank) {
  static const auto results = compare_fixtures("--pp 2 --micro 2", 4);
  expect_matches_one_rank(results, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PipelineParallelTest, ::testing::ValuesIn(kFixtureModels),
                         [](const auto& info) { return info.param; });

std::string generate_flags(const std::string& model) {
  return " generate --model " + std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + model +
         " --prompt-ids 1,2,3,4,5,6,7 --max-tokens 16 --temperature 0 --json --kv-cache-memory "
         "8MiB --threads 1";
}

TEST(PipelineParallelCli, GenerateMatchesOneProcess) {
  for (const std::string model : {"mistral", "gemma3"}) {
    const ProcessRun one = run_local(std::string(LOOM_BINARY) + generate_flags(model));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const ProcessRun two =
        mpirun(std::string(LOOM_BINARY) + generate_flags(model) + " --pipeline-parallel-size 2");
    ASSERT_EQ(two.exit_code, 0) << two.output;
    EXPECT_NE(two.output.find(one.output), std::string::npos)
        << model << ": one rank: " << one.output << "two ranks: " << two.output;
    const ProcessRun four = mpirun(std::string(LOOM_BINARY) + generate_flags(model) +
                                       " --pipeline-parallel-size 2 --tensor-parallel-size 2",
                                   "", 60, 4);
    ASSERT_EQ(four.exit_code, 0) << four.output;
    EXPECT_NE(four.output.find(one.output), std::string::npos)
        << model << ": one rank: " << one.output << "four ranks: " << four.output;
  }
}

TEST(PipelineParallelCli, RefusesWrongRankCount) {
  const ProcessRun r = mpirun(std::string(LOOM_BINARY) + generate_flags("mistral") +
                              " --pipeline-parallel-size 2 --tensor-parallel-size 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--tensor-parallel-size 2 x --pipeline-parallel-size 2 but the MPI job "
                          "has 2 ranks (mpirun -np 4)"),
            std::string::npos)
      << r.output;
}

TEST(PipelineDeadRank, KilledRankEndsTheJob) {
  loom::testing::expect_killed_rank_ends_job("--pp 2");
}

TEST(PipelineDeadRank, StoppedRankTimesOut) {
  loom::testing::expect_stopped_rank_times_out("--pp 2");
}

TEST(PipelineLayoutTest, StageLayers) {
  using loom::stage_layers;
  EXPECT_EQ(stage_layers(5, 0, 2).first_layer, 0);
  EXPECT_EQ(stage_layers(5, 0, 2).last_layer, 2);
  EXPECT_EQ(stage_layers(5, 1, 2).first_layer, 2);
  EXPECT_EQ(stage_layers(5, 1, 2).last_layer, 5);
  EXPECT_EQ(stage_layers(4, 3, 4).first_layer, 3);
  EXPECT_THROW(stage_layers(2, 0, 3), loom::Error);
}

// Three sequences of 3, 1 and 4 new tokens (block size 4, 2 blocks each).
loom::StepInput three_sequences() {
  loom::StepInput s;
  s.tokens = {10, 11, 12, 20, 30, 31, 32, 33};
  s.positions = {5, 6, 7, 2, 0, 1, 2, 3};
  s.attn.num_seqs = 3;
  s.attn.query_start = {0, 3, 4, 8};
  s.attn.context_lens = {8, 3, 4};
  s.attn.max_blocks_per_seq = 2;
  s.attn.block_tables = {1, 2, 3, 0, 4, 0};
  s.attn.slot_mapping = {9, 10, 11, 14, 16, 17, 18, 19};
  s.logit_rows = {7, 2};  // sequence 2's last row first; none of sequence 1
  return s;
}

TEST(SplitStep, WholeSequencesRebased) {
  const auto parts = loom::split_step(three_sequences(), 2);
  ASSERT_EQ(parts.size(), 2u);
  const loom::StepInput& a = parts[0].step;  // sequences 0 and 1 (4 tokens)
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{10, 11, 12, 20}));
  EXPECT_EQ(a.attn.query_start, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(a.attn.block_tables, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(a.logit_rows, (std::vector<int32_t>{2}));
  EXPECT_EQ(parts[0].outputs, (std::vector<int32_t>{1}));
  const loom::StepInput& b = parts[1].step;  // sequence 2
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{30, 31, 32, 33}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(b.attn.num_seqs, 1);
  EXPECT_EQ(b.attn.query_start, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(b.attn.context_lens, (std::vector<int32_t>{4}));
  EXPECT_EQ(b.attn.slot_mapping, (std::vector<int64_t>{16, 17, 18, 19}));
  EXPECT_EQ(b.logit_rows, (std::vector<int32_t>{3}));
  EXPECT_EQ(parts[1].outputs, (std::vector<int32_t>{0}));
}

TEST(SplitStep, PadsMicroBatchesWithoutLogits) {
  const auto parts = loom::split_step(three_sequences(), 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].step.tokens, (std::vector<int32_t>{20}));
  EXPECT_EQ(parts[1].step.logit_rows, (std::vector<int32_t>{0}));
  EXPECT_EQ(parts[1].outputs, (std::vector<int32_t>{-1}));
  // More parts than sequences: one each.
  EXPECT_EQ(loom::split_step(three_sequences(), 8).size(), 3u);
  EXPECT_EQ(loom::split_step(three_sequences(), 1).size(), 1u);
}

}  // namespace
