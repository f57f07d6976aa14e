// Prompt scoring (SamplingParams::prompt_logprobs) on the tiny fixture
// models: scoring prompt + greedy continuation gives the continuation the
// logprobs it was generated with, across prefill chunks, with the prefix
// cache warm (scored prompts skip it), and max_tokens 0 ends after the prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"

namespace loom {
namespace {

class PromptScoring : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend(2);
    model_ = open_model(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + GetParam());
    transformer_ = std::make_unique<Transformer>(model_.config, *model_.weights, *backend_);
  }

  std::unique_ptr<Engine> make_engine(int32_t max_batched, bool prefix_caching) {
    EngineConfig c;
    c.block_size = 4;
    c.num_kv_blocks = 64;
    c.enable_prefix_caching = prefix_caching;
    c.scheduler.max_num_batched_tokens = max_batched;
    c.scheduler.max_num_seqs = 4;
    return std::make_unique<Engine>(*transformer_, nullptr, c);
  }

  // Every event of one request, driving the engine on this thread.
  static std::vector<StreamEvent> run(Engine& engine, Request r) {
    std::vector<StreamEvent> events;
    engine.submit(std::move(r), [&](const StreamEvent& e) { events.push_back(e); });
    while (events.empty() || !events.back().request_done) engine.run_step();
    return events;
  }

  std::unique_ptr<Backend> backend_;
  LoadedModel model_;
  std::unique_ptr<Transformer> transformer_;
};

TEST_P(PromptScoring, ScoresEqualGenerationLogprobs) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back(int32_t(3 + (i * 37) % 200));
  auto engine = make_engine(/*max_batched=*/7, /*prefix_caching=*/true);
  Request gen;
  gen.prompt_ids = prompt;
  gen.params.temperature = 0.0f;
  gen.params.max_tokens = 6;
  gen.params.ignore_eos = true;
  gen.params.logprobs = 0;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  for (const StreamEvent& e : run(*engine, gen)) {
    EXPECT_TRUE(e.prompt_logprobs.empty());  // not asked
    for (const auto& s : e.logprobs) {
      tokens.push_back(s.token);
      logprobs.push_back(s.logprob);
    }
  }
  ASSERT_EQ(tokens.size(), 6u);

  // The whole text again, scored: three chunks of 7, and the first 16 tokens
  // are in the prefix cache now (a scored prompt must not use them).
  Request score;
  score.prompt_ids = prompt;
  score.prompt_ids.insert(score.prompt_ids.end(), tokens.begin(), tokens.end());
  score.params.max_tokens = 0;
  score.params.prompt_logprobs = 3;
  const auto events = run(*engine, score);
  ASSERT_EQ(events.size(), 1u);
  const StreamEvent& e = events[0];
  EXPECT_EQ(e.finish, FinishReason::Length);
  EXPECT_TRUE(e.token_ids.empty());
  ASSERT_EQ(e.prompt_logprobs.size(), score.prompt_ids.size() - 1);
  for (size_t t = 1; t < score.prompt_ids.size(); ++t) {
    const SampleResult& s = e.prompt_logprobs[t - 1];
    EXPECT_EQ(s.token, score.prompt_ids[t]);
    EXPECT_LE(s.logprob, 0.0f);
    EXPECT_GE(s.rank, 1);
    ASSERT_EQ(s.top.size(), 3u);
    EXPECT_GE(s.top[0].logprob, s.top[1].logprob);
    EXPECT_EQ(s.rank == 1, s.top[0].token == s.token || s.top[0].logprob == s.logprob);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const SampleResult& s = e.prompt_logprobs[prompt.size() - 1 + i];
    EXPECT_NEAR(s.logprob, logprobs[i], 1e-3) << "token " << i;
    EXPECT_EQ(s.rank, 1) << "a greedy token is the best";
  }
}

TEST_P(PromptScoring, WithGenerationTheFirstEventCarriesTheScores) {
  auto engine = make_engine(/*max_batched=*/64, /*prefix_caching=*/false);
  Request r;
  r.prompt_ids = {5, 6, 7, 8, 9};
  r.params.max_tokens = 2;
  r.params.ignore_eos = true;
  r.params.n = 2;
  r.params.seed = 1;
  r.params.prompt_logprobs = 0;
  int with_scores = 0;
  for (const StreamEvent& e : run(*engine, r)) {
    if (e.prompt_logprobs.empty()) continue;
    ++with_scores;
    EXPECT_EQ(e.seq_index, 0);
    EXPECT_EQ(e.prompt_logprobs.size(), 4u);
    EXPECT_TRUE(e.prompt_logprobs[0].top.empty());
  }
  EXPECT_EQ(with_scores, 1);
  Request bad = r;
  bad.params.prompt_logprobs.reset();
  bad.params.max_tokens = 0;
  EXPECT_THROW(engine->submit(bad, [](const StreamEvent&) {}), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptScoring, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace loom
