// Engine integration on the CPU backend with the tiny fixture models
// (tests/fixtures/models, made by scripts/make_model_fixtures.py): batch
// invariance at temperature 0 (64 concurrent requests each yield exactly the
// tokens they yield alone), with prefix caching on and off and with a KV pool
// so small that preemption happens; seeded sampling is batch-invariant; n > 1
// siblings; aborts, deadlines and the engine thread; used blocks == 0 at idle.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"
#include "../common/device_sampling_cpu.h"

namespace loom {
namespace {

std::string fixture(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { backend_ = make_cpu_backend(2).release(); }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    model_ = open_model(fixture(GetParam()));
    transformer_ = std::make_unique<Transformer>(model_.config, *model_.weights, *backend_);
    vocab_ = int32_t(model_.config.vocab_size);
  }

  std::unique_ptr<Engine> make_engine(int32_t num_blocks, bool prefix_caching,
                                      int32_t block_size = 16, int32_t max_batched = 256,
                                      int32_t max_seqs = 64, bool greedy_fast_path = true) {
    EngineConfig c;
    c.greedy_fast_path = greedy_fast_path;
    c.block_size = block_size;
    c.num_kv_blocks = num_blocks;
    c.enable_prefix_caching = prefix_caching;
    c.scheduler.max_num_batched_tokens = max_batched;
    c.scheduler.max_num_seqs = max_seqs;
    return std::make_unique<Engine>(*transformer_, nullptr, c);
  }

  // 64 requests; half share one of a few prefixes (so the prefix cache hits).
  std::vector<Request> workload(float temperature, bool seeded, uint64_t seed = 1) {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> p(size_t(16 + rng() % 24));
      for (auto& t : p) t = int32_t(rng() % uint64_t(vocab_));
      prefixes.push_back(p);
    }
    std::vector<Request> reqs;
    for (int i = 0; i < 64; ++i) {
      Request r;
      r.external_id = std::to_string(i);
      if (i % 2 == 0) r.prompt_ids = prefixes[size_t(i / 2) % prefixes.size()];
      const int extra = 1 + int(rng() % 30);
      for (int k = 0; k < extra; ++k) r.prompt_ids.push_back(int32_t(rng() % uint64_t(vocab_)));
      r.params.max_tokens = 4 + int(rng() % 20);
      r.params.temperature = temperature;
      if (seeded) r.params.seed = 1000 + uint64_t(i);
      r.params.top_k = temperature > 0 ? 40 : 0;
      reqs.push_back(r);
    }
    return reqs;
  }

  std::vector<std::vector<int32_t>> run_alone(const std::vector<Request>& reqs) {
    auto engine = make_engine(256, /*prefix_caching=*/false);
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : reqs) {
      auto res = engine->generate({r});
      EXPECT_EQ(res[0].error, EngineErrorKind::None) << res[0].error_message;
      out.push_back(res[0].sequences[0].output_ids);
      EXPECT_EQ(res[0].sequences[0].finish_reason, FinishReason::Length);
    }
    EXPECT_EQ(engine->stats().kv.used_blocks, 0);
    return out;
  }

  void expect_same(const std::vector<std::vector<int32_t>>& alone, const std::vector<Result>& batch,
                   const char* what) {
    ASSERT_EQ(alone.size(), batch.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      EXPECT_EQ(batch[i].error, EngineErrorKind::None) << batch[i].error_message;
      EXPECT_EQ(batch[i].sequences[0].output_ids, alone[i]) << what << ": request " << i;
    }
  }

  static Backend* backend_;
  LoadedModel model_;
  std::unique_ptr<Transformer> transformer_;
  int32_t vocab_ = 0;
};

Backend* EngineTest::backend_ = nullptr;

TEST_P(EngineTest, GreedyBatchInvariance) {
  const auto reqs = workload(0.0f, false);
  const auto alone = run_alone(reqs);
  {
    auto engine = make_engine(512, /*prefix_caching=*/true);
    expect_same(alone, engine->generate(reqs), "batched, prefix cache on");
    // Run again: now most prompts hit the cache.
    expect_same(alone, engine->generate(reqs), "batched again, cache warm");
    const EngineStats s = engine->stats();
    EXPECT_GT(s.kv.prefix_hit_rate(), 0.2);
    EXPECT_EQ(s.kv.used_blocks, 0);
    std::printf("[%s] prefix hit rate %.1f%%, steps %llu\n", GetParam().c_str(),
                100.0 * s.kv.prefix_hit_rate(), (unsigned long long)s.steps);
  }
  {
    auto engine = make_engine(512, /*prefix_caching=*/false);
    expect_same(alone, engine->generate(reqs), "batched, prefix cache off");
    EXPECT_EQ(engine->stats().kv.used_blocks, 0);
  }
  {
    // 12 blocks of 16 tokens for 64 requests of up to ~70 tokens: constant preemption;
    // a small token budget also chunks the prefills.
    auto engine = make_engine(12, /*prefix_caching=*/true, 16, 48, 16);
    expect_same(alone, engine->generate(reqs), "tiny pool with preemption");
    const EngineStats s = engine->stats();
    EXPECT_GT(s.preemptions, 0u);
    EXPECT_EQ(s.kv.used_blocks, 0);
    std::printf("[%s] tiny pool: %llu preemptions over %llu steps\n", GetParam().c_str(),
                (unsigned long long)s.preemptions, (unsigned long long)s.steps);
  }
}

TEST_P(EngineTest, SeededSamplingBatchInvariance) {
  const auto reqs = workload(0.8f, true, 2);
  const auto alone = run_alone(reqs);
  auto engine = make_engine(512, true, 4);  // block size 4 as well
  expect_same(alone, engine->generate(reqs), "seeded, batched");
  auto small = make_engine(24, true, 4, 32, 8);
  expect_same(alone, small->generate(reqs), "seeded, tiny pool");
  EXPECT_GT(small->stats().preemptions, 0u);
  // Different seeds give different tokens somewhere.
  auto other = reqs;
  for (auto& r : other) *r.params.seed += 7;
  auto res = engine->generate(other);
  int differ = 0;
  for (size_t i = 0; i < reqs.size(); ++i) differ += res[i].sequences[0].output_ids != alone[i];
  EXPECT_GT(differ, 32);
}

TEST_P(EngineTest, NSiblingsShareThePromptAndMatchSeededSingles) {
  Request r;
  for (int i = 0; i < 21; ++i) r.prompt_ids.push_back((i * 37 + 5) % vocab_);
  r.params.n = 3;
  r.params.max_tokens = 12;
  r.params.temperature = 1.0f;
  r.params.seed = 77;
  auto engine = make_engine(64, true, 4);  // 21 % 4 != 0: the siblings copy the last block
  auto res = engine->generate({r});
  ASSERT_EQ(res[0].sequences.size(), 3u);
  for (const auto& s : res[0].sequences) {
    EXPECT_EQ(s.output_ids.size(), 12u);
    EXPECT_EQ(s.finish_reason, FinishReason::Length);
  }
  EXPECT_NE(res[0].sequences[0].output_ids, res[0].sequences[1].output_ids);
  // Sibling 0 is exactly the n = 1 request with the same seed.
  Request single = r;
  single.params.n = 1;
  auto one = engine->generate({single});
  EXPECT_EQ(one[0].sequences[0].output_ids, res[0].sequences[0].output_ids);
  // Batched with others, the siblings are unchanged.
  auto batch = workload(0.0f, false);
  batch.insert(batch.begin() + 10, r);
  auto many = make_engine(256, true, 4)->generate(batch);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(many[10].sequences[size_t(k)].output_ids, res[0].sequences[size_t(k)].output_ids);
  EXPECT_EQ(engine->stats().kv.used_blocks, 0);
}

// Greedy rows taken from Backend::argmax_rows give exactly the Sampler's
// tokens, alone and in batches that mix them with rows the Sampler must see
// (logprobs, penalties, bias, min_tokens bans, seeded and unseeded draws, n > 1).
TEST_P(EngineTest, GreedyFastPathMatchesSampler) {
  auto reqs = workload(0.0f, false, 3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplingParams& p = reqs[i].params;
    switch (i % 10) {
      case 1: p.logprobs = 3; break;
      case 2: p.repetition_penalty = 1.3f; break;
      case 3: p.presence_penalty = 0.5f, p.frequency_penalty = 0.25f; break;
      case 4: p.logit_bias = {{int32_t(i) % vocab_, 3.0f}, {7 % vocab_, -100.0f}}; break;
      case 5: p.min_tokens = 3, p.stop_token_ids = {int32_t(i * 13) % vocab_}; break;
      case 6: p.temperature = 0.8f, p.seed = 42 + i; break;
      case 7: p.temperature = 0.7f, p.top_k = 20; break;  // engine-wide generator
      case 8: p.n = 2; break;                            // greedy siblings
      default: break;                                   // plain greedy
    }
  }
  auto plain = workload(0.0f, false, 4);  // every row plain greedy
  for (const auto* batch : {&reqs, &plain}) {
    auto fast_engine = make_engine(512, true);
    auto slow_engine = make_engine(512, true, 16, 256, 64, /*greedy_fast_path=*/false);
    const auto fast = fast_engine->generate(*batch);
    const auto slow = slow_engine->generate(*batch);
    ASSERT_EQ(fast.size(), slow.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      EXPECT_EQ(fast[i].error, EngineErrorKind::None) << fast[i].error_message;
      ASSERT_EQ(fast[i].sequences.size(), slow[i].sequences.size());
      for (size_t k = 0; k < fast[i].sequences.size(); ++k) {
        const auto& a = fast[i].sequences[k];
        const auto& b = slow[i].sequences[k];
        EXPECT_EQ(a.output_ids, b.output_ids) << "request " << i << " seq " << k;
        EXPECT_EQ(a.finish_reason, b.finish_reason) << "request " << i;
        ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "request " << i;
        for (size_t t = 0; t < a.logprobs.size(); ++t) {
          EXPECT_EQ(a.logprobs[t].token, b.logprobs[t].token);
          EXPECT_EQ(a.logprobs[t].logprob, b.logprobs[t].logprob);
        }
      }
    }
    const EngineStats fs = fast_engine->stats(), ss = slow_engine->stats();
    EXPECT_EQ(fs.generated_tokens, ss.generated_tokens);
    EXPECT_GT(fs.argmax_tokens, 0u);
    EXPECT_EQ(ss.argmax_tokens, 0u);
    if (batch == &plain) {
      EXPECT_EQ(fs.argmax_tokens, fs.generated_tokens);
    }
    std::printf("[%s] %llu of %llu tokens from argmax_rows\n", GetParam().c_str(),
                (unsigned long long)fs.argmax_tokens, (unsigned long long)fs.generated_tokens);
  }
  // The plain greedy batch also matches the requests run alone (fast path on).
  expect_same(run_alone(plain), make_engine(512, true)->generate(plain), "fast path, batched");
}

TEST_P(EngineTest, StopTokensAbortsDeadlinesAndRejections) {
  auto engine = make_engine(64, true);
  auto reqs = workload(0.0f, false);
  const auto alone = run_alone({reqs[0]});
  // A stop token id taken from the greedy output ends the sequence there.
  Request stop = reqs[0];
  stop.params.stop_token_ids = {alone[0][2]};
  auto res = engine->generate({stop});
  EXPECT_EQ(res[0].sequences[0].finish_reason, FinishReason::Stop);
  const auto& ids = res[0].sequences[0].output_ids;
  EXPECT_EQ(ids.back(), alone[0][2]);
  EXPECT_LE(ids.size(), 3u);
  // Too long for the pool: rejected, no blocks held.
  Request big = reqs[1];
  big.params.max_tokens = 64 * 16;
  res = engine->generate({big});
  EXPECT_EQ(res[0].error, EngineErrorKind::TooLong);
  // Invalid parameters throw at submit; generate reports them per request.
  Request bad = reqs[1];
  bad.params.top_p = 2.0f;
  EXPECT_THROW(engine->submit(bad, nullptr), Error);
  res = engine->generate({bad, reqs[1]});
  EXPECT_EQ(res[0].error, EngineErrorKind::Invalid);
  EXPECT_EQ(res[1].error, EngineErrorKind::None);
  // A deadline in the past: aborted.
  Request late = reqs[2];
  late.deadline = Clock::now() - std::chrono::seconds(1);
  res = engine->generate({late});
  EXPECT_EQ(res[0].sequences[0].finish_reason, FinishReason::Abort);
  EXPECT_EQ(engine->stats().kv.used_blocks, 0);
}

TEST_P(EngineTest, EngineThreadStreamsAndAborts) {
  auto engine = make_engine(256, true);
  engine->start();
  auto reqs = workload(0.0f, false);
  const auto alone = run_alone(reqs);
  // Threaded generate gives the same tokens.
  expect_same(alone, engine->generate(reqs), "engine thread");
  // Streaming: one event per token, then abort a long request mid-way: the
  // delivery callback sends the abort once 5 tokens have arrived. Delivery
  // runs behind the engine, so on a busy machine the engine may have made all
  // 200 tokens before the abort reaches it: up to 5 attempts, one must stop
  // short (each one's odds of losing the race were ~10% on a loaded 2-core
  // machine).
  bool stopped_short = false;
  for (int attempt = 0; attempt < 5 && !stopped_short; ++attempt) {
    EventQueue q;
    Request longer = reqs[3];
    longer.params.max_tokens = 200;
    std::atomic<int> seen{0};
    std::atomic<bool> aborted{false};
    const RequestId id = engine->submit(longer, [&](const StreamEvent& e) {
      seen += int(e.token_ids.size());
      if (seen >= 5 && !aborted.exchange(true)) engine->abort(e.request_id);
      q.push(e);
    });
    int tokens = 0;
    FinishReason fin = FinishReason::None;
    for (;;) {
      StreamEvent e = q.pop();
      EXPECT_EQ(e.request_id, id);
      EXPECT_LE(e.token_ids.size(), 1u);  // one event per token
      tokens += int(e.token_ids.size());
      if (e.request_done) {
        fin = e.finish;
        break;
      }
    }
    EXPECT_GE(tokens, 5);
    if (fin == FinishReason::Abort) {
      EXPECT_LT(tokens, 200);
      stopped_short = true;
    } else {
      EXPECT_EQ(fin, FinishReason::Length);
      EXPECT_EQ(tokens, 200);
    }
  }
  EXPECT_TRUE(stopped_short) << "no attempt was aborted before its 200 tokens";
  engine->stop();
  EXPECT_EQ(engine->stats().kv.used_blocks, 0);
}

// Async scheduling (the next step launched with the previous step's tokens
// still on the "device") gives exactly the tokens and finish reasons of
// synchronous steps: greedy and sampled rows, stop tokens that end sequences
// while their next step is in flight, length limits, penalties, min_tokens,
// rows that force a synchronous step (logprobs, n > 1, host-sampled), and a
// pool small enough to preempt sequences whose last token is in flight.
TEST_P(EngineTest, AsyncSchedulingMatchesSync) {
  testing_util::DeviceSamplingCpu be(*backend_);
  Transformer model(model_.config, *model_.weights, be);
  auto reqs = workload(0.0f, false, 9);
  const auto alone = run_alone(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplingParams& p = reqs[i].params;
    switch (i % 8) {
      case 1: p.stop_token_ids = {alone[i][std::min<size_t>(2, alone[i].size() - 1)]}; break;
      case 2: p.temperature = 0.9f, p.seed = 500 + i; break;
      case 3: p.temperature = 0.7f, p.seed = 900 + i, p.repetition_penalty = 1.2f, p.min_tokens = 2; break;
      case 4: p.temperature = 0.8f, p.seed = 300 + i, p.presence_penalty = 0.4f, p.stop_token_ids = {3, 5, 8, 13}; break;
      case 5: if (i == 5) p.logprobs = 2; break;  // one request: steps with it run synchronously
      case 6: if (i == 6) p.n = 2, p.temperature = 0.6f, p.seed = 6; break;
      default: break;
    }
  }
  auto run = [&](bool async, int32_t blocks, int32_t budget, int32_t seqs) {
    EngineConfig c;
    c.num_kv_blocks = blocks;
    c.scheduler.max_num_batched_tokens = budget;
    c.scheduler.max_num_seqs = seqs;
    c.async_scheduling = async;
    c.eos_ids = {1, 2};
    Engine engine(model, nullptr, c);
    auto res = engine.generate(reqs);
    const EngineStats st = engine.stats();
    EXPECT_EQ(st.kv.used_blocks, 0);
    // Steps holding the logprobs or n = 2 request run synchronously.
    if (async) EXPECT_GT(st.async_steps, blocks > 100 ? 2u : st.steps / 2) << st.async_steps << " of " << st.steps;
    else EXPECT_EQ(st.async_steps, 0u);
    std::printf("[%s] async %d, %d blocks: %llu steps (%llu async), %llu preemptions\n", GetParam().c_str(), async,
                blocks, (unsigned long long)st.steps, (unsigned long long)st.async_steps,
                (unsigned long long)st.preemptions);
    return res;
  };
  for (int32_t blocks : {512, 14}) {
    const auto sync = run(false, blocks, blocks > 100 ? 256 : 40, blocks > 100 ? 64 : 12);
    const auto async = run(true, blocks, blocks > 100 ? 256 : 40, blocks > 100 ? 64 : 12);
    ASSERT_EQ(sync.size(), async.size());
    int stopped = 0;
    for (size_t i = 0; i < sync.size(); ++i) {
      EXPECT_EQ(async[i].error, EngineErrorKind::None) << async[i].error_message;
      ASSERT_EQ(sync[i].sequences.size(), async[i].sequences.size());
      for (size_t k = 0; k < sync[i].sequences.size(); ++k) {
        EXPECT_EQ(async[i].sequences[k].output_ids, sync[i].sequences[k].output_ids) << "request " << i << " seq " << k;
        EXPECT_EQ(async[i].sequences[k].finish_reason, sync[i].sequences[k].finish_reason) << "request " << i;
        EXPECT_EQ(async[i].sequences[k].logprobs.size(), sync[i].sequences[k].logprobs.size());
        stopped += sync[i].sequences[k].finish_reason == FinishReason::Stop;
      }
    }
    EXPECT_GT(stopped, 4);  // sequences did end on a token while their next step ran
  }
}

// Steps padded to a token bucket and run in pieces (what CUDA records between
// attentions; the CPU runs the padded pieces op by op) give every request the
// tokens of plain steps: greedy and seeded sampling, stop tokens, the prefix
// cache, async scheduling (the step's tokens resolved on the device), and a
// pool small enough to preempt and chunk prefills.
TEST_P(EngineTest, PiecewiseStepsMatchPlain) {
  testing_util::DeviceSamplingCpu be(*backend_);
  Transformer plain(model_.config, *model_.weights, be);
  Transformer pieces(model_.config, *model_.weights, be);
  pieces.enable_piecewise_steps(4096);
  auto reqs = workload(0.0f, false, 11);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplingParams& p = reqs[i].params;
    if (i % 3 == 1) p.temperature = 0.8f, p.seed = 40 + i;
    if (i % 5 == 2) p.stop_token_ids = {3, 5, 8, 13};
  }
  auto run = [&](Transformer& model, int32_t blocks) {
    EngineConfig c;
    c.num_kv_blocks = blocks;
    c.enable_prefix_caching = true;
    c.scheduler.max_num_batched_tokens = blocks > 100 ? 256 : 40;
    c.scheduler.max_num_seqs = blocks > 100 ? 64 : 12;
    c.async_scheduling = true;
    c.eos_ids = {1, 2};
    Engine engine(model, nullptr, c);
    auto res = engine.generate(reqs);
    EXPECT_EQ(engine.stats().kv.used_blocks, 0);
    return res;
  };
  for (int32_t blocks : {512, 14}) {
    const auto want = run(plain, blocks);
    const auto got = run(pieces, blocks);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].error, EngineErrorKind::None) << got[i].error_message;
      ASSERT_EQ(got[i].sequences.size(), want[i].sequences.size());
      EXPECT_EQ(got[i].sequences[0].output_ids, want[i].sequences[0].output_ids) << blocks << " blocks, request " << i;
      EXPECT_EQ(got[i].sequences[0].finish_reason, want[i].sequences[0].finish_reason) << "request " << i;
    }
  }
  EXPECT_GT(pieces.graph_stats().piecewise, 10u);
  EXPECT_EQ(plain.graph_stats().piecewise, 0u);
}

// The engine's KV history is exact (every step's end, not sampled): one
// request of 20 prompt + 5 output tokens peaks at 2 blocks of 16 slots.
TEST_P(EngineTest, KvUsageHistoryAtThePeak) {
  auto engine = make_engine(64, false);
  Request r;
  for (int i = 0; i < 20; ++i) r.prompt_ids.push_back(3 + i);
  r.params.max_tokens = 5;
  r.params.min_tokens = 5;
  r.params.ignore_eos = true;
  engine->generate({r});
  const KvUsageHistory h = engine->stats().kv_history;
  EXPECT_EQ(h.peak_used_blocks, 2);
  EXPECT_EQ(h.peak_allocated_slots, 32);
  EXPECT_GE(h.peak_filled_slots, 20);
  EXPECT_LE(h.peak_filled_slots, 25);
  EXPECT_DOUBLE_EQ(h.peak_waste(), double(32 - h.peak_filled_slots) / 32.0);
  EXPECT_GT(h.allocated_slot_steps, 0u);
  EXPECT_LT(h.filled_slot_steps, h.allocated_slot_steps);
  EXPECT_EQ(engine->stats().kv.used_blocks, 0);  // freed at the end; the history keeps the peak
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineTest, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace loom
