// SpecPolicy as pure logic: fed step costs and acceptance outcomes, it must
// speculate where the expected tokens per second beat plain decoding, with
// the k that pays most, and not where they do not; rest and probe when drafts
// fail; pick a sequence up quickly when its text turns repetitive.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/spec_policy.h"

namespace loom {
namespace {

TEST(StepCostTable, MeasuredInterpolatedExtrapolated) {
  StepCostTable t;
  EXPECT_EQ(t.estimate(1), 0.0);
  t.observe(1, 0.010);
  EXPECT_DOUBLE_EQ(t.estimate(1), 0.010);
  EXPECT_DOUBLE_EQ(t.estimate(5), 0.010);  // one size measured: flat
  t.observe(3, 0.014);
  EXPECT_DOUBLE_EQ(t.estimate(2), 0.012);    // between
  EXPECT_NEAR(t.estimate(5), 0.018, 1e-12);  // beyond: the last two's line
  t.observe(3, 0.024);                       // a running average
  EXPECT_NEAR(t.estimate(3), 0.8 * 0.014 + 0.2 * 0.024, 1e-12);
  t.observe(0, 1.0);   // ignored
  t.observe(2, -1.0);  // ignored
  EXPECT_FALSE(t.measured(2));
  // Sizes not measured for a long time count as not measured.
  for (uint64_t i = 0; i < StepCostTable::kStaleSteps; ++i) t.observe(1, 0.010);
  EXPECT_TRUE(t.measured(1));
  EXPECT_FALSE(t.measured(3));
  EXPECT_DOUBLE_EQ(t.estimate(3), 0.010);
}

TEST(AcceptanceStats, CountsTheFirstRejection) {
  AcceptanceStats s;
  s.observe(4, 4, 1.0);  // all held: 4 of 4 tested
  s.observe(4, 1, 1.0);  // one held, then the second rejected: 1 of 2
  EXPECT_DOUBLE_EQ(s.accepted, 5.0);
  EXPECT_DOUBLE_EQ(s.tested, 6.0);
  s.observe(2, 0, 0.5);
  EXPECT_DOUBLE_EQ(s.accepted, 2.5);
  EXPECT_DOUBLE_EQ(s.tested, 4.0);
}

// One step of a sequence's rest, then whether it may propose.
bool ready(SpecPolicy& p, uint64_t seq) {
  p.step(seq);
  return p.ready(seq);
}

SpecPolicyConfig config(int32_t k, bool free, std::function<double(int32_t)> cost) {
  SpecPolicyConfig c;
  c.max_tokens = k;
  c.free_proposals = free;
  c.fixed_step_seconds = std::move(cost);
  return c;
}

// Expected tokens of a verify of k draft tokens at acceptance a.
double expected(double a, int32_t k) {
  double e = 1.0, p = 1.0;
  for (int32_t i = 0; i < k; ++i) e += (p *= a);
  return e;
}

// The best k by brute force over the rule the policy states.
int32_t brute_best(double a, int32_t kmax, const std::function<double(int32_t)>& cost,
                   double min_saving) {
  int32_t best = 0;
  double best_saving = min_saving * cost(1);
  for (int32_t k = 1; k <= kmax; ++k) {
    const double saving = (expected(a, k) - 1.0) * cost(1) - (cost(1 + k) - cost(1));
    if (saving > best_saving) best = k, best_saving = saving;
  }
  return best;
}

TEST(SpecPolicy, ChoosesTheKThatSavesMostAtBatchOne) {
  // A CPU-like profile: each query token adds 20% of a plain step.
  auto cost = [](int32_t m) { return 0.010 * (1.0 + 0.2 * double(m - 1)); };
  const std::vector<int32_t> draft(16, 7);
  for (double a : {0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.97}) {
    SpecPolicy p(config(16, true, cost));
    // Teach sequence 1 acceptance a: many full-length outcomes.
    for (int i = 0; i < 200; ++i) {
      const int32_t held = int32_t(std::lround(a * 10.0));
      p.observe_verify(1, 10, held);
    }
    const double learnt = p.acceptance(1, 0);
    p.begin_step(1);
    const int32_t k = p.choose(1, 0, draft, 100);
    EXPECT_EQ(k, brute_best(learnt, 16, cost, 0.05)) << "a " << a << " learnt " << learnt;
    if (learnt < 0.2) {
      EXPECT_EQ(k, 0) << a;  // a token gained must pay for a fifth of a step
    }
    if (learnt > 0.85) {
      EXPECT_GE(k, 5) << a;
    }
  }
}

TEST(SpecPolicy, WeightBoundStepsSpeculateMoreThanComputeBound) {
  auto flat = [](int32_t m) { return 0.005 + 0.00001 * double(m); };
  auto steep = [](int32_t m) { return 0.005 * double(m); };
  const std::vector<int32_t> draft(8, 3);
  SpecPolicy a(config(8, true, flat)), b(config(8, true, steep));
  for (SpecPolicy* p : {&a, &b})
    for (int i = 0; i < 50; ++i) p->observe_verify(1, 4, 3);  // a ~ 0.75
  a.begin_step(1);
  b.begin_step(1);
  EXPECT_EQ(a.choose(1, 0, draft, 10), 8);
  EXPECT_EQ(b.choose(1, 0, draft, 10), 0);  // every token costs a whole step: never pays
}

TEST(SpecPolicy, LargerBatchesSpeculateLess) {
  // A step's fixed cost (reading the weights) is shared by its sequences: at
  // batch 64 a draft token must save much more of a token's share.
  auto cost = [](int32_t m) { return 0.004 + 0.0001 * double(m); };
  const std::vector<int32_t> draft(4, 3);
  SpecPolicy p(config(4, true, cost));
  for (uint64_t s = 1; s <= 64; ++s)
    for (int i = 0; i < 20; ++i) p.observe_verify(s, 4, 3);  // a ~ 0.75
  p.begin_step(1);
  EXPECT_EQ(p.choose(1, 0, draft, 10), 4);
  p.begin_step(64);
  int32_t total = 0;
  for (uint64_t s = 1; s <= 64; ++s) total += p.choose(s, 0, draft, 10);
  EXPECT_GT(total, 0);
  EXPECT_LE(total, 64);  // one token each at most
  // Less likely drafts do not pay at all at batch 64.
  SpecPolicy q(config(4, true, cost));
  for (uint64_t s = 1; s <= 64; ++s)
    for (int i = 0; i < 20; ++i) q.observe_verify(s, 4, 1);  // a ~ 0.5
  q.begin_step(64);
  total = 0;
  for (uint64_t s = 1; s <= 64; ++s) total += q.choose(s, 0, draft, 10);
  EXPECT_EQ(total, 0);
}

TEST(SpecPolicy, NoDecisionBeforeAPlainStepIsMeasured) {
  SpecPolicy p(config(4, true, nullptr));
  const std::vector<int32_t> draft(4, 3);
  p.begin_step(1);
  EXPECT_EQ(p.choose(1, 0, draft, 10), 0);
  EXPECT_TRUE(ready(p, 1));  // no verdict, no rest
  p.observe_step(1, 0.010);
  p.begin_step(1);
  // One size measured: a verify is assumed to cost the same (the first one
  // measures it); the prior acceptance (0.5) makes k 4 pay.
  EXPECT_EQ(p.choose(1, 0, draft, 10), 4);
  p.observe_step(5, 0.050);  // it cost five plain steps
  p.observe_verify(1, 4, 2);
  p.begin_step(1);
  EXPECT_EQ(p.choose(1, 0, draft, 12), 0);
}

TEST(SpecPolicy, FreeProposalsLearnFromShadowsAndPickUpRepetitiveText) {
  auto cost = [](int32_t m) { return 0.010 * (1.0 + 0.2 * double(m - 1)); };
  SpecPolicy p(config(8, true, cost));
  std::vector<int32_t> text;  // the sequence's tokens
  for (int32_t i = 0; i < 50; ++i) text.push_back(i);
  // Chat-like: every proposal is wrong. Unverified, each is checked against
  // what was generated.
  int32_t verified = 0, steps = 0;
  for (; steps < 100; ++steps) {
    p.check_shadow(1, text);
    p.begin_step(1);
    if (ready(p, 1)) {
      const std::vector<int32_t> wrong(8, -5);
      const int32_t k = p.choose(1, 1, wrong, int32_t(text.size()));
      if (k > 0) {
        p.observe_verify(1, k, 0);
        ++verified;
      }
    }
    text.push_back(1000 + steps);
  }
  EXPECT_LE(verified, 2);  // the prior lets the first through at most
  EXPECT_LT(p.acceptance(1, 1), 0.15);
  // Now the text repeats what the proposals say: within a few tokens the
  // sequence speculates again.
  std::vector<int32_t> future;
  for (int32_t i = 0; i < 400; ++i) future.push_back(5000 + i);
  size_t at = 0;
  int32_t first_verify = -1;
  for (int32_t step = 0; step < 40 && first_verify < 0; ++step) {
    p.check_shadow(1, text);
    p.begin_step(1);
    if (ready(p, 1)) {
      const std::vector<int32_t> right(future.begin() + int64_t(at),
                                       future.begin() + int64_t(at) + 8);
      if (p.choose(1, 4, right, int32_t(text.size())) > 0) first_verify = step;
    }
    text.push_back(future[at++]);
  }
  ASSERT_GE(first_verify, 0);
  EXPECT_LE(first_verify, 20);
}

TEST(SpecPolicy, DraftModelRestsLongerAndProbes) {
  auto cost = [](int32_t m) { return 0.005 + 0.0002 * double(m); };
  SpecPolicy p(config(4, false, cost));  // fixed costs: the draft's passes count as free
  int32_t proposed = 0, steps = 0;
  std::vector<int32_t> proposal_steps;
  for (; steps < 1000; ++steps) {
    p.begin_step(1);
    if (!ready(p, 1)) continue;
    const int32_t ask = p.request(1);
    if (ask == 0) continue;
    const std::vector<int32_t> wrong(size_t(ask), 9);
    const int32_t k = p.choose(1, 0, wrong, 10 + steps);
    proposed += ask;
    proposal_steps.push_back(steps);
    if (k > 0) p.observe_verify(1, k, 0);
  }
  // Rests of 16, 32, ... 256 steps, each ending with a probe of one token.
  EXPECT_LE(proposal_steps.size(), 10u);
  EXPECT_GE(proposal_steps.size(), 5u);
  EXPECT_LE(proposed, 4 + 4 + 10);
  // A new sequence starts resting too.
  p.begin_step(1);
  EXPECT_FALSE(ready(p, 2));
  EXPECT_FALSE(p.proposes_soon(2));
  // A probe that holds ends the rests: the next steps decide from the costs.
  SpecPolicy q(config(4, false, cost));
  for (int i = 0; i < 8; ++i) q.observe_verify(3, 4, 0);
  q.begin_step(1);
  ASSERT_TRUE(ready(q, 3));
  EXPECT_EQ(q.request(3), 0);  // resting now
  int32_t waited = 0;
  while (!ready(q, 3)) ++waited;
  EXPECT_EQ(waited, 15);  // the 16th step proposes
  q.begin_step(1);
  EXPECT_EQ(q.request(3), 1);  // the probe
  EXPECT_EQ(q.choose(3, 0, std::vector<int32_t>{4}, 50), 1);
  for (int i = 0; i < 6; ++i) q.observe_verify(3, 1, 1);  // and it holds, again and again
  q.begin_step(1);
  EXPECT_TRUE(ready(q, 3));
  EXPECT_GT(q.request(3), 1);
}

TEST(SpecPolicy, DearProbesRestLonger) {
  // Measured costs: a plain step 10 ms; the draft model's last call took
  // 200 ms (it caught up on a long prompt): rests keep such probes within 2%
  // of the time, so at least 1000 steps.
  SpecPolicy p(config(4, false, nullptr));
  p.observe_step(1, 0.010);
  p.observe_step(2, 0.0102);
  for (int i = 0; i < 8; ++i) p.observe_verify(1, 4, 0);
  p.observe_proposal(1, 0.200);
  p.begin_step(1);
  ASSERT_TRUE(ready(p, 1));
  EXPECT_EQ(p.request(1), 0);
  int32_t waited = 0;
  while (!ready(p, 1)) ++waited;
  EXPECT_GE(waited, 999);
  EXPECT_LE(waited, 1001);
}

TEST(SpecPolicy, AlwaysVerifiesEveryProposalAtFullLength) {
  // Every token costs a whole step: the adaptive policy never speculates;
  // "always" (benchmarks of the mechanism) does, and never rests.
  auto steep = [](int32_t m) { return 0.005 * double(m); };
  SpecPolicyConfig c = config(4, false, steep);
  c.always = true;
  SpecPolicy p(c);
  for (int step = 0; step < 50; ++step) {
    p.begin_step(1);
    ASSERT_TRUE(ready(p, 1));
    ASSERT_TRUE(p.proposes_soon(1));
    ASSERT_EQ(p.request(1), 4);
    ASSERT_EQ(p.choose(1, 0, std::vector<int32_t>{1, 2, 3, 4, 5}, 10 + step), 4);
    p.observe_verify(1, 4, 0);
  }
  EXPECT_LT(p.acceptance(1, 0), 0.1);
}

TEST(SpecPolicy, ForcedTokensAreAClassOfTheirOwn) {
  // A CPU-like profile: each query token adds 20% of a plain step.
  auto cost = [](int32_t m) { return 0.010 * (1.0 + 0.2 * double(m - 1)); };
  SpecPolicyConfig c = config(4, true, cost);
  c.max_forced_tokens = 8;
  SpecPolicy p(c);
  const std::vector<int32_t> forced(8, 5);
  // The sequence's proposer drafts fail, its forced tokens hold: each class
  // keeps its own evidence.
  for (int i = 0; i < 20; ++i) {
    p.observe_verify(1, 4, 0);
    p.begin_step(1);
    const int32_t k = p.choose(1, SpecPolicy::kForced, forced, 10);
    ASSERT_GT(k, 0) << i;
    p.observe_verify(1, k, k);
  }
  EXPECT_LT(p.acceptance(1, 0), 0.3);
  EXPECT_GT(p.acceptance(1, SpecPolicy::kForced), 0.9);
  p.begin_step(1);
  EXPECT_EQ(p.choose(1, SpecPolicy::kForced, forced, 10), 8);  // up to max_forced_tokens, not 4
  p.observe_verify(1, 8, 8);
  // A new sequence starts from each class's own acceptance.
  EXPECT_GT(p.acceptance(2, SpecPolicy::kForced), 0.9);
  EXPECT_LT(p.acceptance(2, 0), 0.3);
  // Nothing forced: it rests 1, 2, 4, 8, 8 steps (its steps may then run
  // asynchronously); forced tokens verified end the rests.
  std::vector<int32_t> rests;
  for (int r = 0; r < 5; ++r) {
    p.no_forced(3);
    int32_t n = 0;
    for (; !p.forced_ready(3); ++n) p.step(3);
    rests.push_back(n);
  }
  EXPECT_EQ(rests, (std::vector<int32_t>{1, 2, 4, 8, 8}));
  p.no_forced(3);
  EXPECT_FALSE(p.forced_soon(3));  // 8 steps to go
  for (int n = 0; n < 7; ++n) p.step(3);
  EXPECT_TRUE(p.forced_soon(3));
  EXPECT_FALSE(p.forced_ready(3));
  EXPECT_TRUE(p.ready(3));  // the proposer's rests are not the forced ones'
  p.step(3);
  p.begin_step(1);
  const int32_t k = p.choose(3, SpecPolicy::kForced, forced, 10);
  ASSERT_GT(k, 0);
  p.observe_verify(3, k, k);
  p.no_forced(3);
  p.step(3);
  EXPECT_TRUE(p.forced_ready(3));  // back to a rest of one step
  // A sequence whose forced tokens are refused verifies fewer of them.
  int32_t last = 8;
  for (int i = 0; i < 30 && last > 0; ++i) {
    p.begin_step(1);
    last = p.choose(4, SpecPolicy::kForced, forced, 10);
    if (last > 0) p.observe_verify(4, last, 0);
  }
  EXPECT_LT(p.acceptance(4, SpecPolicy::kForced), 0.35);
  EXPECT_LE(last, 1);
}

TEST(SpecPolicy, UnverifiedForcedTokensAreEvidenceToo) {
  // Rows so dear that the prior acceptance (0.5) does not pay for one.
  auto cost = [](int32_t m) { return 0.010 * (1.0 + 0.5 * double(m - 1)); };
  SpecPolicyConfig c = config(4, false, cost);
  c.max_forced_tokens = 8;
  SpecPolicy p(c);
  const std::vector<int32_t> forced{5, 6, 7, 8};
  p.begin_step(1);
  ASSERT_EQ(p.choose(1, SpecPolicy::kForced, forced, 100), 0);
  EXPECT_FALSE(p.forced_ready(1));  // it rests
  std::vector<int32_t> known(100, 1);
  known.insert(known.end(), forced.begin(), forced.begin() + 2);
  p.check_shadow(1, known);  // not decided yet
  EXPECT_DOUBLE_EQ(p.acceptance(1, SpecPolicy::kForced), 0.5);
  known.insert(known.end(), forced.begin() + 2, forced.end());
  p.check_shadow(1, known);  // the model wrote the forced tokens
  EXPECT_GT(p.acceptance(1, SpecPolicy::kForced), 0.8);
  EXPECT_TRUE(p.forced_ready(1));  // no more resting
  p.begin_step(1);
  EXPECT_GT(p.choose(1, SpecPolicy::kForced, forced, 104), 0);
}

TEST(SpecPolicy, ForgetsSequencesNoLongerRunning) {
  SpecPolicy p(config(4, true, [](int32_t) { return 0.01; }));
  p.observe_verify(1, 4, 0);
  p.observe_verify(2, 4, 0);
  const double before = p.acceptance(2, 0);
  const std::vector<uint64_t> running{1};
  p.retain(running);
  EXPECT_LT(p.acceptance(1, 0), 0.5);
  EXPECT_GT(p.acceptance(2, 0), before);  // back to the class estimate
}

}  // namespace
}  // namespace loom
