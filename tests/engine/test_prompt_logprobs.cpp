// Prompt logprobs (SamplingParams::prompt_logprobs) on the CPU backend with
// the tiny fixture models: every prompt token but the first is scored with
// the log-softmax of the model's logits at the position before it, checked
// against one direct forward pass of the whole prompt; the same whatever the
// prefill chunking, with a warm prefix cache (scoring never takes cache
// hits), under preemption (nothing scored twice), batched with other
// requests, with max_tokens 0 (scoring only), with ranks and top
// alternatives; all of them on the sequence's first event.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"

namespace loom {
namespace {

std::string fixture(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

class PromptLogprobsTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { cpu_ = make_cpu_backend(2).release(); }
  static void TearDownTestSuite() {
    delete cpu_;
    cpu_ = nullptr;
  }
  void SetUp() override {
    model_ = open_model(fixture(GetParam()));
    transformer_ = std::make_unique<Transformer>(model_.config, *model_.weights, *cpu_);
    vocab_ = int32_t(model_.config.vocab_size);
  }

  // log p(prompt[i] | prompt[0, i)) for i >= 1, and the top-k at each position,
  // from one forward pass of the whole prompt with logits at every position.
  std::vector<SampleResult> reference(const std::vector<int32_t>& prompt, int32_t top) {
    const int32_t n = int32_t(prompt.size());
    const int32_t bs = 16;
    KvCache cache = transformer_->allocate_kv_cache((n + bs - 1) / bs, bs, DType::F32);
    StepInput step;
    step.tokens = prompt;
    step.attn.num_seqs = 1;
    step.attn.query_start = {0, n};
    step.attn.context_lens = {n};
    step.attn.max_blocks_per_seq = (n + bs - 1) / bs;
    for (int32_t b = 0; b < step.attn.max_blocks_per_seq; ++b) step.attn.block_tables.push_back(b);
    for (int32_t p = 0; p < n; ++p) {
      step.positions.push_back(p);
      step.attn.slot_mapping.push_back(p);
      if (p + 1 < n) step.logit_rows.push_back(p);
    }
    const Tensor logits = transformer_->forward(step, cache);
    std::vector<float> host;
    copy_to_host_f32(*cpu_, logits, host);
    std::vector<SampleResult> out;
    for (int32_t p = 0; p + 1 < n; ++p) {
      const float* row = host.data() + size_t(p) * size_t(vocab_);
      double mx = -INFINITY, sum = 0;
      for (int32_t t = 0; t < vocab_; ++t) mx = std::max<double>(mx, row[t]);
      for (int32_t t = 0; t < vocab_; ++t) sum += std::exp(double(row[t]) - mx);
      const double lse = mx + std::log(sum);
      SampleResult r;
      r.token = prompt[size_t(p + 1)];
      r.logprob = float(row[r.token] - lse);
      r.rank = 1;
      for (int32_t t = 0; t < vocab_; ++t) r.rank += row[t] > row[r.token];
      std::vector<int32_t> ids(static_cast<size_t>(vocab_));
      for (int32_t t = 0; t < vocab_; ++t) ids[size_t(t)] = t;
      std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      for (int32_t k = 0; k < top; ++k) r.top.push_back({ids[size_t(k)], float(row[ids[size_t(k)]] - lse)});
      out.push_back(r);
    }
    return out;
  }

  static void expect_close(const std::vector<SampleResult>& got, const std::vector<SampleResult>& want,
                           const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].token, want[i].token) << what << " position " << i;
      EXPECT_NEAR(got[i].logprob, want[i].logprob, 1e-4) << what << " position " << i;
      EXPECT_EQ(got[i].rank, want[i].rank) << what << " position " << i;
      ASSERT_EQ(got[i].top.size(), want[i].top.size()) << what;
      for (size_t k = 0; k < want[i].top.size(); ++k) {
        EXPECT_EQ(got[i].top[k].token, want[i].top[k].token) << what << " position " << i << " top " << k;
        EXPECT_NEAR(got[i].top[k].logprob, want[i].top[k].logprob, 1e-4) << what;
      }
    }
  }

  std::unique_ptr<Engine> engine(int32_t blocks, int32_t budget, bool prefix_caching = true) {
    EngineConfig c;
    c.num_kv_blocks = blocks;
    c.scheduler.max_num_batched_tokens = budget;
    c.scheduler.max_num_seqs = std::min(16, budget);
    c.enable_prefix_caching = prefix_caching;
    c.eos_ids = {vocab_ + 1};
    return std::make_unique<Engine>(*transformer_, nullptr, c);
  }

  static Backend* cpu_;
  LoadedModel model_;
  std::unique_ptr<Transformer> transformer_;
  int32_t vocab_ = 0;
};

Backend* PromptLogprobsTest::cpu_ = nullptr;

TEST_P(PromptLogprobsTest, MatchTheForwardPassWhateverTheSchedule) {
  std::mt19937_64 rng(5);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r;
    const int len = 2 + int(rng() % 70);
    for (int k = 0; k < len; ++k) r.prompt_ids.push_back(int32_t(rng() % uint64_t(vocab_)));
    r.params.temperature = 0.0f;
    r.params.max_tokens = i % 3 == 0 ? 0 : 20;
    r.params.prompt_logprobs = i % 2 == 0 ? 0 : 3;
    reqs.push_back(r);
  }
  // Two requests share a long prefix with a plain request run first (warm cache).
  Request warm;
  warm.prompt_ids = reqs[1].prompt_ids;
  warm.params.max_tokens = 2;
  std::vector<std::vector<SampleResult>> want;
  for (const Request& r : reqs) want.push_back(reference(r.prompt_ids, *r.params.prompt_logprobs));

  struct Case {
    const char* what;
    int32_t blocks, budget;
  };
  for (const Case& c : {Case{"one step", 256, 2048}, Case{"chunks of 7", 256, 7},
                        Case{"a pool of 8 blocks (preemption)", 8, 48}}) {
    auto e = engine(c.blocks, c.budget);
    e->generate({warm});
    const auto res = e->generate(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ(res[i].error, EngineErrorKind::None) << res[i].error_message;
      const SequenceResult& s = res[i].sequences[0];
      expect_close(s.prompt_logprobs, want[i], std::string(c.what) + ", request " + std::to_string(i));
      EXPECT_EQ(int32_t(s.output_ids.size()), reqs[i].params.max_tokens) << c.what;
      EXPECT_EQ(s.finish_reason, FinishReason::Length) << c.what;
    }
    EXPECT_EQ(e->stats().kv.used_blocks, 0);
    if (c.blocks < 10) {
      EXPECT_GT(e->stats().preemptions, 0u);
    }
    std::printf("[%s] %s: %llu preemptions\n", GetParam().c_str(), c.what,
                (unsigned long long)e->stats().preemptions);
  }
}

TEST_P(PromptLogprobsTest, MaxTokensZeroNeedsPromptLogprobs) {
  Request r;
  r.prompt_ids = {1, 2, 3};
  r.params.max_tokens = 0;
  EXPECT_THROW(r.params.validate(vocab_), Error);
  r.params.prompt_logprobs = 0;
  EXPECT_NO_THROW(r.params.validate(vocab_));
  r.params.n = 2;
  EXPECT_THROW(r.params.validate(vocab_), Error);
  r.params.n = 1;
  r.params.prompt_logprobs = 21;
  EXPECT_THROW(r.params.validate(vocab_), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PromptLogprobsTest, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace loom
