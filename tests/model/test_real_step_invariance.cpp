// Batch invariance of the CPU forward pass (tests/common/step_invariance.h) on
// the real default GGUF models (scripts/fetch_model.sh), whose quantised
// weights (Q4_K, Q5_0, Q6_K, Q8_0) the tiny fixtures do not have: the row
// path (decode) and the GEMM (prefill) must give a row the same bits. Skips a
// model whose file is absent. A few seconds per model on 2 cores.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "../common/step_invariance.h"
#include "model/model.h"

namespace loom {
namespace {

class RealStepInvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealStepInvarianceTest, LogitsDoNotDependOnTheStep) {
  const char* env = std::getenv("LOOM_MODELS_DIR");  // as scripts/fetch_model.sh
  const std::string dir = env && *env ? env : std::string(LOOM_SOURCE_DIR) + "/models";
  const std::string path = dir + "/" + GetParam();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent: run scripts/fetch_model.sh";
  const auto backend = make_cpu_backend(2);
  const LoadedModel m = open_model(path);
  Transformer model(m.config, *m.weights, *backend);
  testing::StepInvarianceCheck(model, *backend, m.config.vocab_size).run();
}

INSTANTIATE_TEST_SUITE_P(RealModels, RealStepInvarianceTest,
                         ::testing::Values("qwen2.5-coder-0.5b-instruct.gguf",
                                           "gemma-3-270m-q4_k_m.gguf"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find(".gguf"));
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace loom
