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

INSTANTIATE_TEST_SUITE_P(Fixtures, StepInvarianceTest,
                         ::testing::Values("llama3", "llama3_gguf", "llama2", "mistral", "qwen2",
                                           "qwen3", "gemma3", "gemma3_gguf", "gemma3_layer_types",
                                           "llama3_fp8_block"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
