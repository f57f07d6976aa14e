// Speculative decoding on the CPU backend with the tiny fixture models. The
// outputs with speculation must be exactly those without it, token for token
// (greedy, greedy with penalties, seeded sampling with top-k / top-p /
// penalties, logprobs, min_tokens and stop tokens, n > 1, token constraints),
// whatever the proposals: an oracle proposer that knows the plain outputs but
// corrupts some of its guesses exercises acceptance and rejection at every
// depth; the n-gram proposer runs on prompts with repeats; a draft model
// (the target itself: greedy drafts all accepted; another model: mostly
// rejected) proposes with its own paged cache. Also under
// preemption, with the prefix cache, and with the policy's batch cap; no KV
// block is left in use. And sampled outputs with speculation against
// independent ones without it, by a chi-square test.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/proposer.h"
#include "engine/proposer_draft.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "model/transformer.h"
#include "../common/device_sampling_cpu.h"
#include "../common/step_costs.h"
#include "../common/test_constraints.h"

namespace loom {
namespace {

std::string fixture(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

TEST(NgramPropose, LongestRecentMatch) {
  std::vector<int32_t> out;
  ngram_propose(std::vector<int32_t>{1, 2, 3, 4, 5, 9, 1, 2, 3}, 1, 3, 4, out);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 9, 1}));
  ngram_propose(std::vector<int32_t>{7, 1, 2, 8, 1, 2, 6, 2}, 1, 3, 2, out);  // "2": latest earlier is at 5
  EXPECT_EQ(out, (std::vector<int32_t>{6, 2}));
  ngram_propose(std::vector<int32_t>{1, 2, 3}, 1, 3, 4, out);  // no earlier occurrence
  EXPECT_TRUE(out.empty());
  ngram_propose(std::vector<int32_t>{5, 5, 5}, 2, 2, 4, out);  // [5 5] at 0, then one known token
  EXPECT_EQ(out, (std::vector<int32_t>{5}));
  ngram_propose(std::vector<int32_t>{5}, 1, 3, 4, out);
  EXPECT_TRUE(out.empty());
}

// Proposes what the plain run produced for the sequence (by prompt and
// sequence index), with every third guess wrong.
class OracleProposer final : public Proposer {
 public:
  OracleProposer(std::map<std::pair<std::vector<int32_t>, int32_t>, std::vector<int32_t>> outputs, int32_t vocab)
      : outputs_(std::move(outputs)), vocab_(vocab) {}
  void propose(std::span<const Sequence* const> seqs, std::span<const int32_t> max_tokens,
               std::vector<Proposal>& drafts) override {
    drafts.assign(seqs.size(), {});
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Sequence& s = *seqs[i];
      std::vector<int32_t> prompt(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
      auto it = outputs_.find({prompt, s.index});
      if (it == outputs_.end()) continue;
      const auto& ref = it->second;
      for (int32_t j = 0; j < max_tokens[i]; ++j) {
        const size_t at = size_t(s.num_output_tokens() + j);
        if (at >= ref.size()) break;
        drafts[i].tokens.push_back(at % 3 == 2 ? (ref[at] + 1) % vocab_ : ref[at]);
      }
    }
  }

 private:
  std::map<std::pair<std::vector<int32_t>, int32_t>, std::vector<int32_t>> outputs_;
  int32_t vocab_;
};

// Always the same k tokens, or nothing: the policy's worst cases.
class FixedProposer final : public Proposer {
 public:
  explicit FixedProposer(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  void propose(std::span<const Sequence* const> seqs, std::span<const int32_t> max_tokens,
               std::vector<Proposal>& drafts) override {
    drafts.assign(seqs.size(), {});
    for (size_t i = 0; i < seqs.size(); ++i)
      drafts[i].tokens.assign(
          tokens_.begin(),
          tokens_.begin() + std::min<int64_t>(max_tokens[i], int64_t(tokens_.size())));
  }

 private:
  std::vector<int32_t> tokens_;
};

using testing_util::compute_bound_seconds;
using testing_util::weight_bound_seconds;

class SpeculativeTest : public ::testing::TestWithParam<std::string> {
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

  std::vector<Request> workload(uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::vector<Request> reqs;
    for (int i = 0; i < 24; ++i) {
      Request r;
      // Prompts with repeats, so the n-gram proposer finds matches.
      std::vector<int32_t> motif(size_t(3 + rng() % 6));
      for (auto& t : motif) t = int32_t(3 + rng() % uint64_t(vocab_ - 3));
      for (int rep = 0; rep < 2 + int(rng() % 3); ++rep) r.prompt_ids.insert(r.prompt_ids.end(), motif.begin(), motif.end());
      r.prompt_ids.push_back(int32_t(3 + rng() % uint64_t(vocab_ - 3)));
      SamplingParams& p = r.params;
      p.max_tokens = 6 + int(rng() % 20);
      p.temperature = 0.0f;
      switch (i % 8) {
        case 1: p.temperature = 0.9f, p.seed = 100 + uint64_t(i), p.top_k = 30; break;
        case 2: p.temperature = 0.7f, p.seed = 200 + uint64_t(i), p.top_p = 0.9f, p.presence_penalty = 0.5f; break;
        case 3: p.repetition_penalty = 1.3f; break;
        case 4: p.logprobs = 2; break;
        case 5: p.min_tokens = 4, p.stop_token_ids = {5, 6, 7, 8, 9}; break;
        case 6: p.n = 2, p.temperature = 0.8f, p.seed = 31; break;
        default: break;
      }
      reqs.push_back(r);
    }
    return reqs;
  }

  std::vector<Result> run(Backend& be, const std::vector<Request>& reqs, const SpeculativeConfig& spec,
                          int32_t blocks = 512, bool async = true) {
    Transformer model(model_.config, *model_.weights, be);
    EngineConfig c;
    c.num_kv_blocks = blocks;
    c.scheduler.max_num_batched_tokens = 256;
    c.scheduler.max_num_seqs = 32;
    c.eos_ids = {kEos};
    c.speculative = spec;
    c.async_scheduling = async;
    Engine engine(model, nullptr, c);
    auto res = engine.generate(reqs);
    last_ = engine.stats();
    EXPECT_EQ(last_.kv.used_blocks, 0);
    for (const auto& r : res) EXPECT_EQ(r.error, EngineErrorKind::None) << r.error_message;
    return res;
  }

  static void expect_same(const std::vector<Result>& want, const std::vector<Result>& got, const std::string& what) {
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].sequences.size(), got[i].sequences.size()) << what;
      for (size_t k = 0; k < want[i].sequences.size(); ++k) {
        const SequenceResult& a = want[i].sequences[k];
        const SequenceResult& b = got[i].sequences[k];
        EXPECT_EQ(a.output_ids, b.output_ids) << what << ": request " << i << " seq " << k;
        EXPECT_EQ(a.finish_reason, b.finish_reason) << what << ": request " << i;
        ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what << ": request " << i;
        for (size_t j = 0; j < a.logprobs.size(); ++j) {
          EXPECT_EQ(a.logprobs[j].token, b.logprobs[j].token);
          EXPECT_FLOAT_EQ(a.logprobs[j].logprob, b.logprobs[j].logprob) << what << ": request " << i;
        }
      }
    }
  }

  SpeculativeConfig oracle(const std::vector<Request>& reqs, const std::vector<Result>& plain, int32_t k) {
    std::map<std::pair<std::vector<int32_t>, int32_t>, std::vector<int32_t>> outputs;
    for (size_t i = 0; i < reqs.size(); ++i)
      for (const auto& s : plain[i].sequences) outputs[{reqs[i].prompt_ids, s.index}] = s.output_ids;
    SpeculativeConfig sc;
    sc.num_tokens = k;
    sc.max_batch = 0;
    sc.custom = std::make_shared<OracleProposer>(std::move(outputs), vocab_);
    sc.fixed_step_seconds = weight_bound_seconds;
    return sc;
  }

  static constexpr int32_t kEos = 2;
  static Backend* cpu_;
  LoadedModel model_;
  int32_t vocab_ = 0;
  EngineStats last_;
};

Backend* SpeculativeTest::cpu_ = nullptr;

TEST_P(SpeculativeTest, OracleDraftsGiveExactlyThePlainOutputs) {
  const auto reqs = workload(1);
  const auto plain = run(*cpu_, reqs, {});
  for (int32_t k : {1, 3, 5}) {
    for (int32_t blocks : {512, 12}) {
      const std::string what = "k " + std::to_string(k) + ", " + std::to_string(blocks) + " blocks";
      expect_same(plain, run(*cpu_, reqs, oracle(reqs, plain, k), blocks), what);
      EXPECT_GT(last_.spec_draft_tokens, 0u) << what;
      EXPECT_GT(last_.spec_accepted_tokens, 0u) << what;
      EXPECT_LT(last_.spec_accepted_tokens, last_.spec_draft_tokens) << what;  // every third guess is wrong
      if (blocks < 100) {
        EXPECT_GT(last_.preemptions, 0u) << what;
      }
      std::printf("[%s] %s: %llu drafted, %llu accepted, %llu steps, %llu preemptions\n", GetParam().c_str(),
                  what.c_str(), (unsigned long long)last_.spec_draft_tokens,
                  (unsigned long long)last_.spec_accepted_tokens, (unsigned long long)last_.steps,
                  (unsigned long long)last_.preemptions);
    }
  }
}

TEST_P(SpeculativeTest, DeviceSamplerAndConstraintsToo) {
  testing_util::DeviceSamplingCpu device(*cpu_);
  auto reqs = workload(2);
  const auto ban = std::make_shared<testing_util::BanListFactory>(std::vector<int32_t>{3, 4, 10, 11, 12}, vocab_);
  for (size_t i = 0; i < reqs.size(); i += 3) reqs[i].constraint = ban;
  const auto plain = run(device, reqs, {});
  expect_same(plain, run(device, reqs, oracle(reqs, plain, 4)), "device sampler, constraints, oracle k 4");
  EXPECT_GT(last_.spec_accepted_tokens, 0u);
  EXPECT_GT(last_.masked_rows, 0u);
}

TEST_P(SpeculativeTest, NgramProposerAndPolicy) {
  const auto reqs = workload(3);
  const auto plain = run(*cpu_, reqs, {});
  SpeculativeConfig ngram;
  ngram.method = SpeculativeConfig::Method::Ngram;
  ngram.num_tokens = 4;
  ngram.max_batch = 0;
  ngram.fixed_step_seconds = weight_bound_seconds;
  expect_same(plain, run(*cpu_, reqs, ngram), "n-gram k 4");
  EXPECT_GT(last_.spec_draft_tokens, 0u);
  const uint64_t drafted_all = last_.spec_draft_tokens;
  std::printf("[%s] n-gram: %llu drafted, %llu accepted over %llu steps\n", GetParam().c_str(),
              (unsigned long long)last_.spec_draft_tokens, (unsigned long long)last_.spec_accepted_tokens,
              (unsigned long long)last_.steps);
  // Past the batch cap nothing is proposed; the outputs stay the same.
  ngram.max_batch = 4;
  expect_same(plain, run(*cpu_, reqs, ngram), "n-gram, batch cap 4");
  EXPECT_LT(last_.spec_draft_tokens, drafted_all);
  // Requests one by one: each alone, still the same tokens.
  std::vector<Result> alone;
  ngram.max_batch = 0;
  for (const auto& r : reqs) alone.push_back(run(*cpu_, {r}, ngram)[0]);
  expect_same(plain, alone, "n-gram, alone");
}

TEST_P(SpeculativeTest, PolicyRestsLongerAndStepsGoAsync) {
  // One greedy sequence of 200 tokens whose output never repeats a token
  // pair of the fixed proposal, so every proposal is rejected.
  Request r;
  r.prompt_ids = {5, 9, 14, 3, 22};
  r.params.temperature = 0.0f;
  r.params.max_tokens = 200;
  r.params.ignore_eos = true;
  const auto plain = run(*cpu_, {r}, {});
  const std::vector<int32_t>& out = plain[0].sequences[0].output_ids;
  std::vector<int32_t> wrong(4);
  for (int32_t t = 0; t < vocab_ && wrong[0] == 0; ++t)
    if (std::find(out.begin(), out.end(), t) == out.end()) wrong.assign(4, t);
  ASSERT_NE(wrong[0], 0) << "every token occurs in the output";
  for (const bool empty : {false, true}) {
    SpeculativeConfig sc;
    sc.num_tokens = 4;
    sc.custom = std::make_shared<FixedProposer>(empty ? std::vector<int32_t>{} : wrong);
    sc.fixed_step_seconds = compute_bound_seconds;
    const std::string what = empty ? "empty proposals" : "rejected proposals";
    expect_same(plain, run(*cpu_, {r}, sc), what);
    EXPECT_EQ(last_.spec_accepted_tokens, 0u) << what;
    // Rests of 16, 32, 64, 128 steps: a handful of verify steps in 200
    // tokens (a fixed 16-step rest would verify about 12 times).
    EXPECT_LE(last_.spec_draft_tokens, 6u * 4u) << what;
    // Resting, the steps run asynchronously (the CPU argmax is a device one).
    EXPECT_GT(last_.async_steps, 100u) << what;
    std::printf("[%s] %s: %llu drafted, %llu async steps of %llu\n", GetParam().c_str(), what.c_str(),
                (unsigned long long)last_.spec_draft_tokens, (unsigned long long)last_.async_steps,
                (unsigned long long)last_.steps);
  }
}

// Sampling with speculation follows the target's distribution: the second
// and third output tokens of one prompt sampled under 4,000 seeds with drafts
// verified (the greedy continuation proposed, so drafts are accepted and
// rejected), against 4,000 other seeds without speculation; a two-sample
// chi-square test per position (bins with fewer than 10 expected draws
// merged) must not reject at p = 0.001. (A temperature of 0.36 instead of
// 0.3 on the speculative side gives chi-square values 4 to 20 times the
// critical ones: the test sees a distortion that small.)
TEST_P(SpeculativeTest, SampledDistributionMatchesPlainByChiSquare) {
  Request base;
  base.prompt_ids = {5, 9, 14, 3, 22, 7};
  base.params.temperature = 0.0f;
  base.params.max_tokens = 3;
  base.params.ignore_eos = true;
  const std::vector<int32_t> greedy = run(*cpu_, {base}, {})[0].sequences[0].output_ids;
  constexpr int kDraws = 4000;
  auto draws = [&](uint64_t first_seed, const SpeculativeConfig& spec) {
    std::vector<Request> reqs(kDraws, base);
    for (int i = 0; i < kDraws; ++i) {
      reqs[size_t(i)].params.temperature = 0.3f;
      reqs[size_t(i)].params.top_k = 40;
      reqs[size_t(i)].params.seed = first_seed + uint64_t(i);
    }
    return run(*cpu_, reqs, spec);
  };
  SpeculativeConfig sc;
  sc.num_tokens = 2;
  sc.max_batch = 0;
  sc.always = true;
  sc.custom = std::make_shared<FixedProposer>(std::vector<int32_t>{greedy[1], greedy[2]});
  const auto plain = draws(1'000'000, {});
  const auto spec = draws(2'000'000, sc);
  std::printf("[%s] %llu of %llu draft tokens accepted\n", GetParam().c_str(),
              (unsigned long long)last_.spec_accepted_tokens, (unsigned long long)last_.spec_draft_tokens);
  EXPECT_GT(last_.spec_accepted_tokens, 150u);
  EXPECT_LT(last_.spec_accepted_tokens, last_.spec_draft_tokens);
  for (size_t pos : {size_t(1), size_t(2)}) {
    std::map<int32_t, std::pair<double, double>> counts;  // token: plain, speculative
    for (int i = 0; i < kDraws; ++i) {
      counts[plain[size_t(i)].sequences[0].output_ids.at(pos)].first += 1;
      counts[spec[size_t(i)].sequences[0].output_ids.at(pos)].second += 1;
    }
    // Merge rare tokens into one bin (both samples are the same size).
    std::vector<std::pair<double, double>> bins;
    std::pair<double, double> rare{0, 0};
    for (const auto& [t, c] : counts) {
      if (c.first + c.second < 20)
        rare.first += c.first, rare.second += c.second;
      else
        bins.push_back(c);
    }
    if (rare.first + rare.second > 0) bins.push_back(rare);
    double chi2 = 0;
    for (const auto& [a, b] : bins) chi2 += (a - b) * (a - b) / (a + b);
    const double dof = double(bins.size()) - 1;
    ASSERT_GE(dof, 3) << "too few distinct tokens to test";
    // The chi-square quantile at 1 - 0.001 (Wilson-Hilferty).
    const double z = 3.0902, h = 2.0 / (9.0 * dof);
    const double critical = dof * std::pow(1.0 - h + z * std::sqrt(h), 3);
    std::printf("[%s] output position %zu: chi-square %.1f over %.0f degrees of freedom (critical %.1f)\n",
                GetParam().c_str(), pos, chi2, dof, critical);
    EXPECT_LT(chi2, critical) << "position " << pos;
  }
}

TEST_P(SpeculativeTest, DraftModelProposer) {
  const auto reqs = workload(4);
  const auto plain = run(*cpu_, reqs, {});
  const std::string other = GetParam() == "llama3" ? "qwen2" : "llama3";
  for (const std::string& name : {GetParam(), other}) {
    const LoadedModel draft_model = open_model(fixture(name));
    Transformer draft(draft_model.config, *draft_model.weights, *cpu_);
    for (int32_t blocks : {512, 12}) {
      SpeculativeConfig sc;
      sc.method = SpeculativeConfig::Method::Draft;
      sc.num_tokens = 3;
      sc.max_batch = 0;
      // A pass takes at most 40 tokens: longer prompts are caught up over steps.
      sc.custom = make_draft_proposer(draft, vocab_, 40);
      sc.fixed_step_seconds = weight_bound_seconds;
      const std::string what = "draft " + name + ", " + std::to_string(blocks) + " blocks";
      expect_same(plain, run(*cpu_, reqs, sc, blocks), what);
      EXPECT_GT(last_.spec_draft_tokens, 0u) << what;
      std::printf("[%s] %s: %llu drafted, %llu accepted, %llu steps, %llu preemptions\n", GetParam().c_str(),
                  what.c_str(), (unsigned long long)last_.spec_draft_tokens,
                  (unsigned long long)last_.spec_accepted_tokens, (unsigned long long)last_.steps,
                  (unsigned long long)last_.preemptions);
      if (name == GetParam() && blocks == 512) {
        // The target drafting for itself, greedy: every draft token is the
        // target's own argmax, accepted unless the sequence ended before it.
        std::vector<Request> greedy = reqs;
        for (Request& r : greedy) {
          const int32_t max_tokens = r.params.max_tokens;
          r.params = SamplingParams{};
          r.params.temperature = 0.0f;
          r.params.max_tokens = max_tokens;
        }
        const auto want = run(*cpu_, greedy, {});
        expect_same(want, run(*cpu_, greedy, sc, blocks), what + ", greedy");
        std::printf("[%s] %s, greedy: %llu drafted, %llu accepted\n", GetParam().c_str(), what.c_str(),
                    (unsigned long long)last_.spec_draft_tokens, (unsigned long long)last_.spec_accepted_tokens);
        EXPECT_GE(last_.spec_accepted_tokens * 10, last_.spec_draft_tokens * 9) << what;
      }
      if (blocks < 100) {
        EXPECT_GT(last_.preemptions, 0u) << what;
      }
    }
  }
  const LoadedModel tiny = open_model(fixture(other));
  Transformer draft(tiny.config, *tiny.weights, *cpu_);
  EXPECT_THROW(make_draft_proposer(draft, vocab_ - 1, 40), Error);  // a larger vocabulary than the target's
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeTest, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace loom
