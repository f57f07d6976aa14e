// Batch invariance of the CPU forward pass (tests/common/step_invariance.h)
// for every fixture model: sliding windows, GQA, GGUF, FP8 checkpoints.
#include <gtest/gtest.h>

#include "../common/step_invariance.h"
#include "model/model.h"

namespace loom {
namespace {

class StepInvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StepInvarianceTest, LogitsDoNotDependOnTheStep) {
  const auto backend = make_cpu_backend(2);
  const LoadedModel m = open_model(testing::model_fixture_path(GetParam()));
  Transformer model(m.config, *m.weights, *backend);
  testing::StepInvarianceCheck(model, *backend, m.config.vocab_size).run();
}

// Steps padded to a token bucket and run in pieces (what CUDA records between
// attentions; here op by op): every schedule's rows are the bits of the plain
// model's whole-prompt step.
TEST_P(StepInvarianceTest, PiecewiseStepsGiveThePlainBits) {
  const auto backend = make_cpu_backend(2);
  const LoadedModel m = open_model(testing::model_fixture_path(GetParam()));
  Transformer plain(m.config, *m.weights, *backend);
  Transformer pieces(m.config, *m.weights, *backend);
  pieces.enable_piecewise_steps(4096);
  testing::StepInvarianceCheck(pieces, *backend, m.config.vocab_size, &plain).run();
  EXPECT_GT(pieces.graph_stats().piecewise, 0u);
  EXPECT_EQ(pieces.graph_stats().eager, 0u);
  EXPECT_EQ(plain.graph_stats().piecewise, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepInvarianceTest,
                         ::testing::Values("llama3", "llama3_gguf", "llama2", "mistral", "qwen2",
                                           "qwen3", "gemma3", "gemma3_gguf", "gemma3_layer_types",
                                           "llama3_fp8_block"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
