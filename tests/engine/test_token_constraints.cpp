// The step executor's token-constraint hook on the CPU backend, with the
// tiny fixture models: a ban list applied through the mask path gives exactly
// the tokens of the same bans applied as -inf logit edits (min_tokens bans of
// stop ids) and as logit_bias -100, for greedy and seeded sampled requests,
// synchronous and async steps (a stand-in device sampler), alone and batched
// (batch invariance); a stateful constraint (a forced token sequence) is
// advanced on every accepted token, ends its sequence when terminated, and
// forks with n > 1 siblings. No KV block is left in use.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"
#include "../common/device_sampling_cpu.h"
#include "../common/test_constraints.h"

namespace loom {
namespace {

using testing_util::BanListFactory;
using testing_util::DeviceSamplingCpu;
using testing_util::ForcedSequenceFactory;

std::string fixture(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

class TokenConstraintTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { cpu_ = make_cpu_backend(2).release(); }
  static void TearDownTestSuite() {
    delete cpu_;
    cpu_ = nullptr;
  }
  void SetUp() override {
    model_ = open_model(fixture(GetParam()));
    vocab_ = int32_t(model_.config.vocab_size);
  }

  std::vector<Result> run(Backend& be, const std::vector<Request>& reqs, bool async, bool batched = true) {
    Transformer model(model_.config, *model_.weights, be);
    EngineConfig c;
    c.num_kv_blocks = 512;
    c.scheduler.max_num_batched_tokens = 1024;
    c.scheduler.max_num_seqs = 64;
    c.async_scheduling = async;
    c.eos_ids = {kEos};
    std::vector<Result> out;
    {
      Engine engine(model, nullptr, c);
      if (batched) {
        out = engine.generate(reqs);
      } else {
        for (const Request& r : reqs) out.push_back(engine.generate({r})[0]);
      }
      const EngineStats st = engine.stats();
      EXPECT_EQ(st.kv.used_blocks, 0);
      last_stats_ = st;
    }
    for (const Result& r : out) EXPECT_EQ(r.error, EngineErrorKind::None) << r.error_message;
    return out;
  }

  // 24 requests, all admitted at once (so every variant runs the same
  // batches): greedy and seeded sampling with top-k / top-p / penalties.
  std::vector<Request> workload() const {
    std::mt19937_64 rng(7);
    std::vector<Request> reqs;
    for (int i = 0; i < 24; ++i) {
      Request r;
      r.external_id = std::to_string(i);
      const int len = 3 + int(rng() % 40);
      for (int k = 0; k < len; ++k) r.prompt_ids.push_back(int32_t(rng() % uint64_t(vocab_)));
      SamplingParams& p = r.params;
      p.max_tokens = 4 + int(rng() % 16);
      switch (i % 4) {
        case 1: p.temperature = 0.9f, p.seed = 100 + uint64_t(i), p.top_k = 30; break;
        case 2: p.temperature = 0.7f, p.seed = 200 + uint64_t(i), p.top_p = 0.9f, p.presence_penalty = 0.5f; break;
        default: p.temperature = 0.0f; break;
      }
      reqs.push_back(r);
    }
    return reqs;
  }

  static constexpr int32_t kEos = 2;
  static Backend* cpu_;
  LoadedModel model_;
  int32_t vocab_ = 0;
  EngineStats last_stats_;
};

Backend* TokenConstraintTest::cpu_ = nullptr;

std::vector<std::vector<int32_t>> tokens_of(const std::vector<Result>& res) {
  std::vector<std::vector<int32_t>> out;
  for (const Result& r : res) out.push_back(r.sequences[0].output_ids);
  return out;
}

TEST_P(TokenConstraintTest, BanListMaskEqualsMinusInfinityEdits) {
  const std::vector<Request> plain = workload();
  const auto free_run = tokens_of(run(*cpu_, plain, false));
  // Ban what the unconstrained requests chose most, so the bans bite.
  std::map<int32_t, int> counts;
  for (const auto& out : free_run)
    for (int32_t t : out) ++counts[t];
  std::vector<std::pair<int, int32_t>> by_count;
  for (const auto& [t, c] : counts)
    if (t != kEos) by_count.emplace_back(-c, t);
  std::sort(by_count.begin(), by_count.end());
  std::vector<int32_t> banned{kEos};
  for (size_t i = 0; i < std::min<size_t>(12, by_count.size()); ++i) banned.push_back(by_count[i].second);
  const auto factory = std::make_shared<BanListFactory>(banned, vocab_);

  std::vector<Request> masked = plain, edited = plain, biased = plain;
  for (size_t i = 0; i < plain.size(); ++i) {
    masked[i].constraint = factory;
    masked[i].params.ignore_eos = true;  // eos is banned by the list, never a stop here
    // The same bans as -inf logit edits: stop ids banned below min_tokens.
    edited[i].params.stop_token_ids.assign(banned.begin() + 1, banned.end());
    edited[i].params.min_tokens = edited[i].params.max_tokens;
    for (int32_t t : banned) biased[i].params.logit_bias[t] = -100.0f;
    biased[i].params.ignore_eos = true;
  }
  const auto with_mask = tokens_of(run(*cpu_, masked, false));
  EXPECT_EQ(last_stats_.masked_rows, last_stats_.generated_tokens);
  const auto with_edits = tokens_of(run(*cpu_, edited, false));
  const auto with_bias = tokens_of(run(*cpu_, biased, false));
  const auto mask_alone = tokens_of(run(*cpu_, masked, false, /*batched=*/false));
  DeviceSamplingCpu device_sampler(*cpu_);
  const auto mask_async = tokens_of(run(device_sampler, masked, true));
  EXPECT_GT(last_stats_.async_steps, 0u);
  const auto edits_device = tokens_of(run(device_sampler, edited, false));

  int changed = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(with_mask[i], with_edits[i]) << "request " << i;
    EXPECT_EQ(with_mask[i], with_bias[i]) << "request " << i;
    EXPECT_EQ(with_mask[i], mask_alone[i]) << "batch invariance, request " << i;
    EXPECT_EQ(mask_async[i], edits_device[i]) << "async mask vs device edits, request " << i;
    EXPECT_EQ(int32_t(with_mask[i].size()), plain[i].params.max_tokens);
    for (int32_t t : with_mask[i]) EXPECT_EQ(std::count(banned.begin(), banned.end(), t), 0) << "request " << i;
    changed += with_mask[i] != free_run[i];
  }
  EXPECT_GT(changed, int(plain.size()) / 2) << "the bans did not change the outputs";
}

TEST_P(TokenConstraintTest, ForcedSequenceAdvancesStopsAndForks) {
  std::mt19937_64 rng(3);
  std::vector<Request> reqs = workload();
  std::vector<std::vector<int32_t>> want;
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int32_t> seq(size_t(2 + rng() % 6));
    for (auto& t : seq) t = int32_t(3 + rng() % uint64_t(vocab_ - 3));
    reqs[i].constraint = std::make_shared<ForcedSequenceFactory>(seq);
    reqs[i].params.max_tokens = 20;
    if (i % 6 == 5) reqs[i].params.n = 2, reqs[i].params.temperature = 0.8f, reqs[i].params.seed = 9;
    want.push_back(seq);
  }
  DeviceSamplingCpu device_sampler(*cpu_);
  for (bool async : {false, true}) {
    Backend& be = async ? static_cast<Backend&>(device_sampler) : *cpu_;
    const auto res = run(be, reqs, async);
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ(res[i].sequences.size(), size_t(reqs[i].params.n));
      for (const SequenceResult& s : res[i].sequences) {
        EXPECT_EQ(s.output_ids, want[i]) << "request " << i << " async " << async;
        EXPECT_EQ(s.finish_reason, FinishReason::Stop) << "request " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenConstraintTest, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace loom
