// Heap allocations of decode steps: the engine (scheduling, the step's input,
// sampling, token events, detokenisation) allocates per step, not per
// generated token, so a step of 32 sequences costs about what a step of 4
// costs. Every operator new of this binary is counted; the CPU backend's
// per-op allocations are per step too.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "../common/paged_step.h"
#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow forms too (std::stable_sort's buffer): every form this binary's
// deletes free must come from malloc (a sanitizer checks the pairing).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace loom {
namespace {

class StepAllocations : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = make_cpu_backend(2);
    model_ = open_model(testing::model_fixture_dir("llama3"));
    transformer_ = std::make_unique<Transformer>(model_.config, *model_.weights, *backend_);
    tokenizer_ = load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3");
  }

  // Allocations of generating `tokens` greedy tokens for each of `seqs`
  // requests of 16 prompt tokens, all at once, on a fresh engine (prefix
  // caching on, as served).
  int64_t allocations(int seqs, int tokens) {
    EngineConfig c;
    c.num_kv_blocks = 512;
    c.enable_prefix_caching = true;
    Engine engine(*transformer_, tokenizer_.get(), c);
    std::vector<Request> reqs;
    for (int i = 0; i < seqs; ++i) {
      Request r;
      for (int k = 0; k < 16; ++k) r.prompt_ids.push_back(int32_t((7 * i + 13 * k) % 200 + 32));
      r.params.max_tokens = tokens;
      r.params.temperature = 0;
      r.params.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    const int64_t before = g_allocations.load();
    const std::vector<Result> out = engine.generate(std::move(reqs));
    const int64_t n = g_allocations.load() - before;
    for (const Result& r : out) {
      EXPECT_EQ(r.error, EngineErrorKind::None) << r.error_message;
      EXPECT_EQ(r.sequences[0].output_ids.size(), size_t(tokens));
    }
    return n;
  }

  std::unique_ptr<Backend> backend_;
  LoadedModel model_;
  std::unique_ptr<Transformer> transformer_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(StepAllocations, AStepsAllocationsDoNotGrowWithItsTokens) {
#ifndef NDEBUG
  GTEST_SKIP() << "debug builds check the scheduler's invariants after every step, with maps per sequence";
#endif
  allocations(4, 8);  // first-use growth of the backend's thread buffers
  // 64 more decode steps at 4 and at 32 sequences.
  const int64_t few = allocations(4, 96) - allocations(4, 32);
  const int64_t many = allocations(32, 96) - allocations(32, 32);
  const double per_step = double(few) / 64;
  const double per_token = double(many - few) / (28.0 * 64);
  std::printf("64 decode steps: %lld allocations at 4 sequences, %lld at 32: %.1f per step, %.3f per extra token\n",
              static_cast<long long>(few), static_cast<long long>(many), per_step, per_token);
  // What follows the tokens: the prefix cache's block commits (one or two per
  // 16 tokens) and the amortised growth of each sequence's own lists (its
  // tokens, block table, output ids and text), about 0.33 per token here;
  // one allocation per token would add 1.
  EXPECT_LT(per_token, 0.5);
  EXPECT_GT(few, 0);  // the counter sees the engine's allocations at all
}

}  // namespace
}  // namespace loom
