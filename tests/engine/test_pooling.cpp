// Pooling requests (Request::pooling) on the tiny fixture models: the
// engine's vector equals the one pooled from a direct forward pass of the
// prompt alone (final-norm hidden states), whatever the request is batched
// with (generation, other pooling requests, prefill chunks, prefix-cache
// hits, preemption); nothing is sampled and the KV blocks go back in the step
// that completes the prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "../common/paged_step.h"
#include "backend/backend.h"
#include "core/error.h"
#include "engine/engine.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "model/transformer.h"

namespace loom {
namespace {

std::vector<int32_t> make_prompt(int32_t len, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < len; ++i) p.push_back(3 + (i * 37 + salt * 11) % 200);
  return p;
}

class Pooling : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend(2);
    model_ = open_model(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + GetParam());
    transformer_ = std::make_unique<Transformer>(model_.config, *model_.weights, *backend_);
  }

  std::unique_ptr<Engine> make_engine(int32_t max_batched, int32_t num_blocks,
                                      bool prefix_caching = true) {
    EngineConfig c;
    c.block_size = 4;
    c.num_kv_blocks = num_blocks;
    c.enable_prefix_caching = prefix_caching;
    c.scheduler.max_num_batched_tokens = max_batched;
    c.scheduler.max_num_seqs = std::min(8, max_batched);
    return std::make_unique<Engine>(*transformer_, nullptr, c);
  }

  // The prompt alone through Transformer::forward (a cache of its own): every
  // position's final-norm hidden state, pooled and normalised as asked.
  std::vector<float> direct(const std::vector<int32_t>& prompt, PoolingParams params) {
    KvCache cache = transformer_->allocate_kv_cache(64, 4, DType::F32);
    testing::ShuffledBlockPool pool(64, 7);
    testing::PagedSequence seq;
    StepInput step = testing::make_paged_step({{&seq, prompt}}, pool, 4);
    for (size_t i = 0; i < prompt.size(); ++i) step.hidden_rows.push_back(int32_t(i));
    transformer_->forward(step, cache);
    std::vector<float> rows;
    copy_to_host_f32(*backend_, transformer_->hidden_states(), rows);
    const size_t width = size_t(model_.config.hidden_size);
    EXPECT_EQ(rows.size(), prompt.size() * width);
    const PoolingRange range = pooling_range(params.type, int32_t(prompt.size()));
    std::vector<double> v(width, 0.0);
    for (int32_t p = range.begin; p < range.end; ++p)
      for (size_t j = 0; j < width; ++j) v[j] += rows[size_t(p) * width + j];
    double norm = 0.0;
    for (double& x : v) {
      x /= double(range.end - range.begin);
      norm += x * x;
    }
    std::vector<float> out;
    for (double x : v) out.push_back(float(params.normalize ? x / std::sqrt(norm) : x));
    return out;
  }

  static void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                           const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0.0;
    for (float x : want) scale = std::max(scale, double(std::fabs(x)));
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, scale)) << what << " element " << i;
  }

  std::unique_ptr<Backend> backend_;
  LoadedModel model_;
  std::unique_ptr<Transformer> transformer_;
};

struct Outcome {
  std::vector<StreamEvent> events;
  bool done() const { return !events.empty() && events.back().request_done; }
};

TEST_P(Pooling, EqualsTheDirectForwardWhateverTheBatch) {
  // A long generation keeps decoding while pooling requests of every type
  // are prefilled in chunks of 7 tokens beside it and beside each other.
  auto engine = make_engine(/*max_batched=*/7, /*num_blocks=*/96);
  std::vector<Request> requests;
  Request gen;
  gen.prompt_ids = make_prompt(9, 1);
  gen.params.temperature = 0.0f;
  gen.params.max_tokens = 24;
  gen.params.ignore_eos = true;
  requests.push_back(gen);
  const std::vector<PoolingParams> kinds = {{PoolingType::Last, true},
                                            {PoolingType::Mean, true},
                                            {PoolingType::Cls, true},
                                            {PoolingType::Mean, false},
                                            {PoolingType::Last, false}};
  for (size_t k = 0; k < kinds.size(); ++k) {
    Request r;
    r.prompt_ids = make_prompt(int32_t(5 + 6 * k), int32_t(k + 2));
    r.pooling = kinds[k];
    requests.push_back(r);
  }
  std::vector<Outcome> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    engine->submit(requests[i], [&out, i](const StreamEvent& e) { out[i].events.push_back(e); });
  for (int guard = 0; guard < 1000 && !std::all_of(out.begin(), out.end(),
                                                   [](const Outcome& o) { return o.done(); });
       ++guard)
    engine->run_step();
  int32_t generated = 0;
  for (const StreamEvent& e : out[0].events) generated += int32_t(e.token_ids.size());
  EXPECT_EQ(generated, 24);
  for (size_t k = 0; k < kinds.size(); ++k) {
    const Outcome& o = out[k + 1];
    ASSERT_EQ(o.events.size(), 1u) << "one event per pooling request";
    const StreamEvent& e = o.events[0];
    EXPECT_TRUE(e.request_done);
    EXPECT_EQ(e.finish, FinishReason::Stop);
    EXPECT_EQ(e.error, EngineErrorKind::None);
    EXPECT_TRUE(e.token_ids.empty());
    expect_close(
        e.embedding, direct(requests[k + 1].prompt_ids, kinds[k]),
        std::string(pooling_type_name(kinds[k].type)) + (kinds[k].normalize ? " normalised" : ""));
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.generated_tokens, 24u) << "pooling requests sample nothing";
  EXPECT_EQ(s.kv.used_blocks, 0);
}

TEST_P(Pooling, PrefixCacheHitsAndAloneGiveTheSameVector) {
  auto engine = make_engine(/*max_batched=*/64, /*num_blocks=*/64);
  const std::vector<int32_t> prompt = make_prompt(19, 5);
  for (PoolingType type : {PoolingType::Last, PoolingType::Mean, PoolingType::Cls}) {
    const std::vector<float> want = direct(prompt, {type, true});
    for (int round = 0; round < 2; ++round) {  // the second finds the prompt's blocks cached
      Request r;
      r.prompt_ids = prompt;
      r.pooling = PoolingParams{type, true};
      const Result res = engine->generate({r})[0];
      ASSERT_EQ(res.error, EngineErrorKind::None) << res.error_message;
      EXPECT_EQ(res.sequences[0].finish_reason, FinishReason::Stop);
      expect_close(res.sequences[0].embedding, want,
                   std::string(pooling_type_name(type)) + " round " + std::to_string(round));
    }
  }
  EXPECT_GT(engine->stats().kv.prefix_hit_tokens, 0) << "last-token pooling takes cache hits";
  EXPECT_EQ(engine->stats().kv.used_blocks, 0);
}

TEST_P(Pooling, PreemptedPromptsPoolEachPositionOnce) {
  // 12 blocks of 4 tokens: a generation growing to 40 tokens (10 blocks)
  // and 22-token prompts (6 blocks each) prefilled 8 tokens a step cannot
  // all hold their KV: the lower-ranked pooling prompts are preempted part
  // way and recomputed.
  auto engine = make_engine(/*max_batched=*/8, /*num_blocks=*/12, /*prefix_caching=*/false);
  std::vector<Request> requests;
  Request gen;
  gen.prompt_ids = make_prompt(20, 9);
  gen.params.temperature = 0.0f;
  gen.params.max_tokens = 20;
  gen.params.ignore_eos = true;
  requests.push_back(gen);
  for (int k = 0; k < 3; ++k) {
    Request r;
    r.prompt_ids = make_prompt(22, 20 + k);
    r.pooling = PoolingParams{k == 1 ? PoolingType::Last : PoolingType::Mean, true};
    r.priority = 1 + k;  // below the generation: they are the ones preempted
    requests.push_back(r);
  }
  std::vector<Outcome> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    engine->submit(requests[i], [&out, i](const StreamEvent& e) { out[i].events.push_back(e); });
  for (int guard = 0; guard < 2000 && !std::all_of(out.begin(), out.end(),
                                                   [](const Outcome& o) { return o.done(); });
       ++guard)
    engine->run_step();
  for (size_t i = 1; i < requests.size(); ++i) {
    ASSERT_TRUE(out[i].done());
    ASSERT_EQ(out[i].events.back().error, EngineErrorKind::None)
        << out[i].events.back().error_message;
    expect_close(out[i].events.back().embedding,
                 direct(requests[i].prompt_ids, *requests[i].pooling),
                 "request " + std::to_string(i));
  }
  EXPECT_GT(engine->stats().preemptions, 0u);
  EXPECT_EQ(engine->stats().kv.used_blocks, 0);
}

TEST_P(Pooling, BadPoolingRequestsAreRefused) {
  auto engine = make_engine(64, 64);
  Request r;
  r.prompt_ids = {5, 6, 7};
  r.pooling = PoolingParams{};
  r.params.n = 2;
  EXPECT_THROW(engine->submit(r, [](const StreamEvent&) {}), Error);
  r.params.n = 1;
  r.params.prompt_logprobs = 1;
  EXPECT_THROW(engine->submit(r, [](const StreamEvent&) {}), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Pooling, ::testing::Values("llama3", "qwen2", "gemma3"));

// Scheduler alone: a pooling prompt's blocks are freed by the output of the
// step that completes it, and its event carries the vector.
TEST(PoolingScheduler, BlocksFreedInTheStepThatCompletesThePrompt) {
  KvManager kv(KvConfig{16, 4, true});
  Scheduler sched(SchedulerConfig{}, kv);
  Request r;
  r.prompt_ids = {1, 2, 3, 4, 5, 6};
  r.pooling = PoolingParams{PoolingType::Mean, false};
  SeqId seq = 0;
  ASSERT_EQ(sched.add_request(1, r, &seq), AdmitStatus::Admitted);
  const StepPlan plan = sched.schedule(Clock::now());
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(kv.num_used_blocks(), 2);
  StepOutput out;
  out.pooled.push_back(PooledRows{seq, 0, 6, {6.0f, 12.0f}});
  sched.update_from_output(plan, out);
  EXPECT_EQ(kv.num_used_blocks(), 0);
  EXPECT_TRUE(sched.idle());
  const auto events = sched.take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event.embedding, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_TRUE(events[0].event.request_done);
  sched.check_invariants();
}

}  // namespace
}  // namespace loom
