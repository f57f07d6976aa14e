// Sampler and SequenceOutput: each sampling option (distribution checks with
// fixed seeds), seeded determinism, logprobs, edge cases; stop tokens, stop
// strings across token boundaries, min/max tokens and streaming hold-back.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <limits>
#include <numeric>

#include "engine/sampler.h"
#include "engine/sequence_output.h"

namespace loom {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

// Frequencies of n draws (unseeded: the engine-wide generator).
std::vector<double> frequencies(Sampler& s, const std::vector<float>& logits,
                                const SamplingParams& p, int n = 40000) {
  std::vector<double> f(logits.size(), 0.0);
  SampleContext ctx{&p, {}, {}, 0, {}};
  for (int i = 0; i < n; ++i) f[size_t(s.sample(logits, ctx).token)] += 1.0 / n;
  return f;
}

void expect_distribution(const std::vector<double>& got, const std::vector<double>& want,
                         int n = 40000) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double sigma = std::sqrt(std::max(want[i] * (1 - want[i]), 1e-12) / n);
    EXPECT_NEAR(got[i], want[i], 5 * sigma + 1e-9) << "token " << i;
  }
}

const std::vector<double> kProbs = {0.1, 0.2, 0.3, 0.4};

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.seed = 5;
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(s.sample(l, {&p, {}, {}, 0, {}}).token, 1);
  l[3] = 3.5f;
  EXPECT_EQ(s.sample(l, {&p, {}, {}, 3, {}}).token, 3);
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  Sampler s(1);
  SamplingParams p;
  expect_distribution(frequencies(s, logits_of(kProbs), p), kProbs);
}

TEST(Sampler, TemperatureSharpens) {
  Sampler s(2);
  SamplingParams p;
  p.temperature = 0.5f;  // p^2, renormalised
  std::vector<double> want;
  double z = 0;
  for (double q : kProbs) z += q * q;
  for (double q : kProbs) want.push_back(q * q / z);
  expect_distribution(frequencies(s, logits_of(kProbs), p), want);
}

TEST(Sampler, TopKTopPMinP) {
  Sampler s(3);
  SamplingParams p;
  p.top_k = 2;
  expect_distribution(frequencies(s, logits_of(kProbs), p), {0, 0, 3.0 / 7, 4.0 / 7});
  p = {};
  p.top_p = 0.5f;  // 0.4 < 0.5 <= 0.7: the best two
  expect_distribution(frequencies(s, logits_of(kProbs), p), {0, 0, 3.0 / 7, 4.0 / 7});
  p.top_p = 0.75f;  // three
  expect_distribution(frequencies(s, logits_of(kProbs), p), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
  p = {};
  p.min_p = 0.6f;  // keep p >= 0.24
  expect_distribution(frequencies(s, logits_of(kProbs), p), {0, 0, 3.0 / 7, 4.0 / 7});
  p = {};
  p.top_p = 0.0f;  // only the best: greedy-like
  expect_distribution(frequencies(s, logits_of(kProbs), p, 2000), {0, 0, 0, 1}, 2000);
}

TEST(Sampler, FiltersOnLargeVocabularies) {
  // Equal logits: ties rank by id, so the kept set is a prefix of the ids.
  Sampler s(4);
  std::vector<float> l(5000, 0.0f);
  SamplingParams p;
  p.top_k = 1000;
  SampleContext ctx{&p, {}, {}, 0, {}};
  for (int i = 0; i < 3000; ++i) ASSERT_LT(s.sample(l, ctx).token, 1000);
  p = {};
  p.top_p = 0.9f;
  int high = 0;
  for (int i = 0; i < 3000; ++i) {
    int t = s.sample(l, ctx).token;
    ASSERT_LT(t, 4500);
    high += t >= 2250;
  }
  EXPECT_GT(high, 1200);  // the kept set is used uniformly, not just the first 256
  p.top_k = 700;
  p.top_p = 0.5f;  // of the top 700: 350
  for (int i = 0; i < 3000; ++i) ASSERT_LT(s.sample(l, ctx).token, 350);
  p = {};
  p.min_p = 0.5f;
  l[4999] = 1.0f;  // exp(-1) = 0.37 < 0.5: only the peak survives
  for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(l, ctx).token, 4999);
}

TEST(Sampler, LogitBiasBansAllButOne) {
  Sampler s(5);
  std::vector<float> l(300);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7);
  SamplingParams p;
  for (int32_t t = 0; t < 300; ++t)
    if (t != 123) p.logit_bias[t] = -100.0f;
  SampleContext ctx{&p, {}, {}, 0, {}};
  for (int i = 0; i < 500; ++i) ASSERT_EQ(s.sample(l, ctx).token, 123);
  p.logit_bias.clear();
  p.logit_bias[3] = 100.0f;
  p.temperature = 0;
  EXPECT_EQ(s.sample(l, ctx).token, 3);
}

TEST(Sampler, Penalties) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  std::vector<int32_t> prompt = {0};
  std::vector<int32_t> output;
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  p.repetition_penalty = 2.0f;  // 2 -> 1: token 1 wins
  EXPECT_EQ(s.sample(l, {&p, prompt, output, 0, {}}).token, 1);
  // Negative logits are multiplied: -1 -> -2.
  std::vector<float> neg = {-1.0f, -1.5f};
  EXPECT_EQ(s.sample(neg, {&p, prompt, output, 0, {}}).token, 1);
  p = {};
  p.temperature = 0;
  output = {0, 0};
  p.frequency_penalty = 0.3f;  // 2 - 0.6 = 1.4 < 1.5
  EXPECT_EQ(s.sample(l, {&p, {}, output, 0, {}}).token, 1);
  p.frequency_penalty = 0.2f;  // 1.6 > 1.5
  EXPECT_EQ(s.sample(l, {&p, {}, output, 0, {}}).token, 0);
  p.presence_penalty = 0.2f;  // 1.4
  EXPECT_EQ(s.sample(l, {&p, {}, output, 0, {}}).token, 1);
  // Presence/frequency look at the output only, not the prompt.
  p = {};
  p.temperature = 0;
  p.presence_penalty = 2.0f;
  EXPECT_EQ(s.sample(l, {&p, prompt, {}, 0, {}}).token, 0);
}

TEST(Sampler, BannedTokensNeverDrawn) {
  Sampler s(6);
  SamplingParams p;
  std::vector<int32_t> banned = {3};
  SampleContext ctx{&p, {}, {}, 0, banned};
  for (int i = 0; i < 2000; ++i) ASSERT_NE(s.sample(logits_of(kProbs), ctx).token, 3);
  p.temperature = 0;
  EXPECT_EQ(s.sample(logits_of(kProbs), ctx).token, 2);
}

TEST(Sampler, SeededDrawsDependOnlyOnSeedIndexAndStep) {
  SamplingParams p;
  p.seed = 1234;
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i)));
  std::vector<int32_t> out;
  std::vector<int32_t> first;
  {
    Sampler s(1);
    for (int step = 0; step < 64; ++step) {
      int32_t t = s.sample(l, {&p, {}, out, 0, {}}).token;
      first.push_back(t);
      out.push_back(t);
    }
  }
  // Another engine seed, other requests interleaved: the same tokens.
  Sampler s(99);
  SamplingParams other;
  out.clear();
  for (int step = 0; step < 64; ++step) {
    s.sample(l, {&other, {}, {}, 0, {}});
    int32_t t = s.sample(l, {&p, {}, out, 0, {}}).token;
    ASSERT_EQ(t, first[size_t(step)]) << "step " << step;
    out.push_back(t);
  }
  // Another sequence index gives another stream.
  out.clear();
  int same = 0;
  for (int step = 0; step < 64; ++step) {
    int32_t t = s.sample(l, {&p, {}, out, 1, {}}).token;
    same += t == first[size_t(step)];
    out.push_back(t);
  }
  EXPECT_LT(same, 32);
  // The generator itself: uniform and in range.
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    double u = philox_uniform(7, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Sampler, SeededDistribution) {
  // Over many steps a seeded stream still follows the distribution.
  Sampler s;
  SamplingParams p;
  p.seed = 42;
  std::vector<float> l = logits_of(kProbs);
  std::vector<int32_t> out;
  std::vector<double> f(4, 0);
  const int n = 40000;
  for (int i = 0; i < n; ++i) {
    int32_t t = s.sample(l, {&p, {}, out, 0, {}}).token;
    f[size_t(t)] += 1.0 / n;
    out.push_back(t);
  }
  expect_distribution(f, kProbs, n);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0.3f;
  p.logprobs = 2;
  p.logit_bias[0] = 100.0f;  // changes the choice, not the reported logprobs
  std::vector<float> l = logits_of(kProbs);
  SampleResult r = s.sample(l, {&p, {}, {}, 0, {}});
  EXPECT_EQ(r.token, 0);
  EXPECT_NEAR(r.logprob, std::log(0.1), 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 3);
  EXPECT_NEAR(r.top[0].logprob, std::log(0.4), 1e-5);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_NEAR(r.top[1].logprob, std::log(0.3), 1e-5);
}

// ------------------------------------------------------------ SequenceOutput

class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::vector<std::string> vocab) : vocab_(std::move(vocab)) {}
  std::vector<int32_t> encode(std::string_view, bool, bool) const override { return {}; }
  std::string token_bytes(int32_t id, bool include_special) const override {
    if (id == eos_ && !include_special) return "";
    return vocab_.at(size_t(id));
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id, !skip_special);
    return s;
  }
  int32_t vocab_size() const override { return int32_t(vocab_.size()); }
  bool is_special(int32_t id) const override { return id == eos_; }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string_view token_text(int32_t id) const override { return vocab_.at(size_t(id)); }

 private:
  std::vector<std::string> vocab_;
  int32_t eos_ = 0;
};

const FakeTokenizer& fake() {
  static FakeTokenizer t({"<eos>", "Hel", "lo", " wor", "ld", "!", "\xC3", "\xA9", "x"});
  return t;
}
const std::vector<int32_t> kEos = {0};

struct Fed {
  std::string streamed;
  FinishReason finish = FinishReason::None;
  int fed = 0;
};

Fed feed(SequenceOutput& out, const std::vector<int32_t>& tokens) {
  Fed f;
  for (int32_t t : tokens) {
    ++f.fed;
    f.streamed += out.append(t, f.fed, &f.finish);
    if (f.finish != FinishReason::None) break;
  }
  if (f.finish == FinishReason::None) f.streamed += out.flush();
  return f;
}

TEST(SequenceOutput, StopStringAcrossTokensCutsTheText) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"o wo"};
  SequenceOutput out(&fake(), p, kEos);
  std::string partial;
  FinishReason fin;
  partial += out.append(1, 1, &fin);  // "Hel"
  partial += out.append(2, 2, &fin);  // "lo": "Hello", "llo" could start... held back
  EXPECT_EQ(fin, FinishReason::None);
  EXPECT_EQ(partial, "He");  // 3 bytes held back (longest stop - 1)
  partial += out.append(3, 3, &fin);  // " wor": matches
  EXPECT_EQ(fin, FinishReason::Stop);
  EXPECT_EQ(partial, "Hell");
  EXPECT_EQ(out.text(), "Hell");
}

TEST(SequenceOutput, IncludeStopString) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop = {"xx", "lo w"};
  p.include_stop_str_in_output = true;
  SequenceOutput out(&fake(), p, kEos);
  Fed f = feed(out, {1, 2, 3, 4});
  EXPECT_EQ(f.finish, FinishReason::Stop);
  EXPECT_EQ(f.streamed, "Hello w");
  EXPECT_EQ(f.fed, 3);
}

TEST(SequenceOutput, StopTokensEosAndIgnoreEos) {
  SamplingParams p;
  p.max_tokens = 100;
  p.stop_token_ids = {5};
  {
    SequenceOutput out(&fake(), p, kEos);
    Fed f = feed(out, {1, 2, 5, 4});
    EXPECT_EQ(f.finish, FinishReason::Stop);
    EXPECT_EQ(f.streamed, "Hello");  // the stop token's text is not output
  }
  {
    SequenceOutput out(&fake(), p, kEos);
    Fed f = feed(out, {1, 0, 4});
    EXPECT_EQ(f.finish, FinishReason::Stop);
    EXPECT_EQ(f.fed, 2);
  }
  p.ignore_eos = true;
  {
    SequenceOutput out(&fake(), p, kEos);
    EXPECT_EQ(out.min_tokens_bans(), std::vector<int32_t>{5});
    Fed f = feed(out, {1, 0, 4});
    EXPECT_EQ(f.finish, FinishReason::None);
    EXPECT_EQ(f.streamed, "Helld");
  }
}

TEST(SequenceOutput, MaxAndMinTokens) {
  SamplingParams p;
  p.max_tokens = 2;
  p.stop = {"zzz"};
  {
    SequenceOutput out(&fake(), p, kEos);
    Fed f = feed(out, {1, 2, 3});
    EXPECT_EQ(f.finish, FinishReason::Length);
    EXPECT_EQ(f.streamed, "Hello");  // held-back text released at the end
  }
  p.max_tokens = 10;
  p.min_tokens = 2;
  {
    SequenceOutput out(&fake(), p, kEos);
    EXPECT_EQ(out.min_tokens_bans(), std::vector<int32_t>{0});
    Fed f = feed(out, {1, 0, 0});  // eos at 2 is too early (would be banned); at 3 it stops
    EXPECT_EQ(f.finish, FinishReason::Stop);
    EXPECT_EQ(f.fed, 3);
  }
}

TEST(SequenceOutput, Utf8HeldUntilComplete) {
  SamplingParams p;
  p.max_tokens = 10;
  SequenceOutput out(&fake(), p, kEos);
  FinishReason fin;
  EXPECT_EQ(out.append(8, 1, &fin), "x");
  EXPECT_EQ(out.append(6, 2, &fin), "");
  EXPECT_EQ(out.append(7, 3, &fin), "\xC3\xA9");
}

TEST(SequenceOutput, NoTokenizerNoText) {
  SamplingParams p;
  p.max_tokens = 3;
  p.stop_token_ids = {9};
  SequenceOutput out(nullptr, p, {});
  Fed f = feed(out, {1, 2, 3});
  EXPECT_EQ(f.finish, FinishReason::Length);
  EXPECT_EQ(f.streamed, "");
}

// Sampler::logit_edits says what sample() does to the logits: applying the
// edits (repetition, then -sub, then +add, then bans) to the raw row and
// sampling that with the filters alone draws the same token for the same seed.
TEST(Sampler, LogitEditsMatchSample) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t vocab = 50;
    std::vector<float> logits(vocab);
    for (float& x : logits) x = normal(rng);
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = trial % 3 == 0 ? 10 : 0;
    p.top_p = trial % 4 == 0 ? 0.8f : 1.0f;
    p.seed = 1000 + trial;
    p.repetition_penalty = trial % 2 ? 1.3f : 1.0f;
    p.presence_penalty = trial % 5 == 0 ? 0.5f : 0.0f;
    p.frequency_penalty = trial % 3 == 1 ? 0.25f : 0.0f;
    p.logit_bias = {{int32_t(trial % vocab), 3.0f}, {int32_t((trial * 7) % vocab), -2.0f}};
    std::vector<int32_t> prompt = {1, 2, 3, int32_t(trial % vocab)};
    std::vector<int32_t> output = {4, 4, 5, int32_t((trial * 3) % vocab), 4};
    std::vector<int32_t> banned = {int32_t((trial * 11) % vocab)};
    Sampler a(1), b(1);
    const SampleContext ctx{&p, prompt, output, 2, banned};
    const int32_t want = a.sample(logits, ctx).token;

    std::vector<LogitEdit> edits;
    Sampler::logit_edits(ctx, vocab, edits);
    std::vector<float> edited = logits;
    std::set<int32_t> seen;
    for (const LogitEdit& e : edits) {
      ASSERT_TRUE(seen.insert(e.token).second) << "two edits for token " << e.token;
      float& x = edited[size_t(e.token)];
      if (e.rep != 1.0f) x = x > 0 ? x / e.rep : x * e.rep;
      x -= e.sub;
      x += e.add;
      if (e.ban) x = -std::numeric_limits<float>::infinity();
    }
    SamplingParams plain = p;
    plain.repetition_penalty = 1.0f;
    plain.presence_penalty = plain.frequency_penalty = 0.0f;
    plain.logit_bias.clear();
    const SampleContext plain_ctx{&plain, prompt, output, 2, {}};
    EXPECT_EQ(b.sample(edited, plain_ctx).token, want) << "trial " << trial;
    EXPECT_EQ(b.draw_uniform(plain_ctx), philox_uniform(*p.seed, 2, output.size()));
  }
}

}  // namespace
}  // namespace loom
