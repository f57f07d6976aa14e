// Forward pass vs HF transformers: for every fixture under
// tests/fixtures/models (made by scripts/make_model_fixtures.py, and the FP8
// checkpoints by scripts/make_fp8_fixtures.py: HF on their dequantised
// weights, which the CPU backend runs dequantised to f32), loom's
// fp32 logits at every prompt position match HF's within 1e-3 whether the
// prompt is fed in one step, in chunks, or one token at a time through a
// paged cache (block size 4, shuffled physical blocks); greedy decoding
// reproduces HF's 32 tokens; batching sequences changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/transformer.h"
#include "../common/paged_step.h"

namespace loom {
namespace {

constexpr float kTolerance = 1e-3f;
constexpr int64_t kBlockSize = 4;
constexpr int64_t kNumBlocks = 96;

using testing::argmax;
using Sequence = testing::PagedSequence;
using Reference = testing::ModelReference;

class BlockPool : public testing::ShuffledBlockPool {
 public:
  explicit BlockPool(uint32_t seed) : ShuffledBlockPool(kNumBlocks, seed) {}
};

std::string fixture_dir(const std::string& name) { return testing::model_fixture_dir(name); }
std::string model_path(const std::string& name) { return testing::model_fixture_path(name); }
Reference load_reference(const std::string& name) { return testing::load_model_reference(name); }

StepInput make_step(std::vector<std::pair<Sequence*, std::vector<int32_t>>> parts, BlockPool& pool) {
  return testing::make_paged_step(std::move(parts), pool, kBlockSize);
}

std::vector<std::vector<float>> to_rows(Backend& backend, const Tensor& logits) {
  return testing::logits_to_rows(backend, logits);
}

float max_abs_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    for (size_t j = 0; j < std::min(a[i].size(), b[i].size()); ++j) m = std::max(m, std::fabs(a[i][j] - b[i][j]));
  }
  return m;
}

// Worst |Δlogit| seen per fixture, printed at the end.
std::map<std::string, float>& worst() {
  static std::map<std::string, float> w;
  return w;
}

class ForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { backend_ = make_cpu_backend(2).release(); }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
    for (const auto& [name, d] : worst()) std::printf("max |dlogit| %-20s %.3g\n", name.c_str(), d);
  }

  void SetUp() override {
    ref_ = load_reference(GetParam());
    model_ = open_model(model_path(GetParam()));
    transformer_ = std::make_unique<Transformer>(model_.config, *model_.weights, *backend_);
  }

  // All-position logits of `prompt`, fed `chunk` tokens per step.
  std::vector<std::vector<float>> run_prompt(const std::vector<int32_t>& prompt, size_t chunk, uint32_t seed) {
    KvCache cache = transformer_->allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
    BlockPool pool(seed);
    Sequence seq;
    std::vector<std::vector<float>> out;
    for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
      const size_t end = std::min(prompt.size(), begin + chunk);
      StepInput step = make_step({{&seq, {prompt.begin() + begin, prompt.begin() + end}}}, pool);
      for (auto& row : to_rows(*backend_, transformer_->forward(step, cache))) out.push_back(std::move(row));
    }
    return out;
  }

  void record(float d) {
    float& w = worst()[GetParam()];
    w = std::max(w, d);
  }

  static Backend* backend_;
  Reference ref_;
  LoadedModel model_;
  std::unique_ptr<Transformer> transformer_;
};

Backend* ForwardTest::backend_ = nullptr;

TEST_P(ForwardTest, PrefillMatchesHf) {
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    const float d = max_abs_diff(run_prompt(ref_.prompts[p], ref_.prompts[p].size(), 1), ref_.logits[p]);
    record(d);
    EXPECT_LE(d, kTolerance) << "prompt " << p;
  }
}

TEST_P(ForwardTest, ChunkedAndTokenByTokenMatchHf) {
  for (size_t chunk : {size_t{3}, size_t{5}, size_t{1}}) {
    for (size_t p = 0; p < ref_.prompts.size(); ++p) {
      const float d = max_abs_diff(run_prompt(ref_.prompts[p], chunk, 7 + static_cast<uint32_t>(chunk)),
                                   ref_.logits[p]);
      record(d);
      EXPECT_LE(d, kTolerance) << "prompt " << p << ", chunk " << chunk;
    }
  }
}

TEST_P(ForwardTest, GreedyMatchesHf) {
  for (size_t p = 0; p < ref_.prompts.size(); ++p) {
    KvCache cache = transformer_->allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
    BlockPool pool(3);
    Sequence seq;
    const auto& prompt = ref_.prompts[p];
    StepInput step = make_step({{&seq, prompt}}, pool);
    step.logit_rows = {static_cast<int32_t>(prompt.size()) - 1};  // last position only
    std::vector<int32_t> generated;
    int32_t next = argmax(to_rows(*backend_, transformer_->forward(step, cache))[0]);
    for (size_t i = 0; i < ref_.greedy[p].size(); ++i) {
      generated.push_back(next);
      if (i + 1 == ref_.greedy[p].size()) break;
      StepInput decode = make_step({{&seq, {next}}}, pool);
      next = argmax(to_rows(*backend_, transformer_->forward(decode, cache))[0]);
    }
    EXPECT_EQ(generated, ref_.greedy[p]) << "prompt " << p;
  }
}

TEST_P(ForwardTest, BatchedEqualsAlone) {
  // Prompts 1 and 2 prefilled together in one step, then prompt 0 prefilled
  // while both decode their first token: each row must match HF (and so the
  // sequence alone).
  KvCache cache = transformer_->allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
  BlockPool pool(11);
  Sequence a, b, c;
  const auto& pa = ref_.prompts[1];
  const auto& pb = ref_.prompts[2];
  const auto& pc = ref_.prompts[0];
  auto rows = to_rows(*backend_, transformer_->forward(make_step({{&a, pa}, {&b, pb}}, pool), cache));
  ASSERT_EQ(rows.size(), pa.size() + pb.size());
  std::vector<std::vector<float>> rows_a(rows.begin(), rows.begin() + static_cast<long>(pa.size()));
  std::vector<std::vector<float>> rows_b(rows.begin() + static_cast<long>(pa.size()), rows.end());
  float d = std::max(max_abs_diff(rows_a, ref_.logits[1]), max_abs_diff(rows_b, ref_.logits[2]));
  record(d);
  EXPECT_LE(d, kTolerance);

  // Mixed step: decode a and b (their greedy first tokens) and prefill c.
  const int32_t na = ref_.greedy[1][0], nb = ref_.greedy[2][0];
  rows = to_rows(*backend_, transformer_->forward(make_step({{&a, {na}}, {&c, pc}, {&b, {nb}}}, pool), cache));
  ASSERT_EQ(rows.size(), pc.size() + 2);
  std::vector<std::vector<float>> rows_c(rows.begin() + 1, rows.end() - 1);
  d = max_abs_diff(rows_c, ref_.logits[0]);
  record(d);
  EXPECT_LE(d, kTolerance);
  EXPECT_EQ(argmax(rows.front()), ref_.greedy[1][1]);
  EXPECT_EQ(argmax(rows.back()), ref_.greedy[2][1]);

  // Bitwise: the same step content alone gives the same numbers as batched.
  Sequence solo;
  KvCache cache2 = transformer_->allocate_kv_cache(kNumBlocks, kBlockSize, DType::F32);
  BlockPool pool2(5);
  auto alone = to_rows(*backend_, transformer_->forward(make_step({{&solo, pc}}, pool2), cache2));
  EXPECT_LE(max_abs_diff(alone, rows_c), 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForwardTest,
                         ::testing::Values("llama3", "llama3_gguf", "llama2", "llama_linear",
                                           "llama_yarn", "mistral", "qwen2", "qwen3", "gemma3",
                                           "gemma3_gguf", "gemma3_layer_types", "llama3_fp8_block",
                                           "qwen2_fp8_channel", "llama3_fp8_static"),
                         [](const auto& info) { return info.param; });

// --- API errors ---

TEST(OpenModel, Errors) {
  auto expect_error = [](const std::string& path, const char* fragment) {
    try {
      open_model(path);
      ADD_FAILURE() << "expected an error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error("/nonexistent/model.gguf", "no such file");
  expect_error(std::string(LOOM_SOURCE_DIR) + "/tests", "no config.json");
  expect_error(std::string(LOOM_SOURCE_DIR) + "/CMakeLists.txt", "not a GGUF file or model directory");
}

TEST(OpenModel, GenerationDefaultsAndFormat) {
  LoadedModel m = open_model(fixture_dir("llama_linear"));
  EXPECT_EQ(m.format, ModelFormat::HfDirectory);
  EXPECT_EQ(m.gguf, nullptr);
  EXPECT_EQ(m.generation.temperature, 0.6);
  EXPECT_EQ(m.generation.top_k, 40);
  EXPECT_EQ(m.generation.eos_token_ids, (std::vector<int32_t>{2, 3}));
  LoadedModel g = open_model(fixture_dir("llama3_gguf") + "/model.gguf");
  EXPECT_EQ(g.format, ModelFormat::Gguf);
  EXPECT_NE(g.gguf, nullptr);
  EXPECT_TRUE(g.config.rope.interleaved);
  EXPECT_FALSE(g.config.rope.freq_factors.empty());
}

TEST(TransformerApi, WeightShapesAreCheckedAgainstConfig) {
  LoadedModel m = open_model(fixture_dir("qwen3"));
  auto backend = make_cpu_backend(1);
  ModelConfig c = m.config;
  c.intermediate_size = 96;
  try {
    Transformer t(c, *m.weights, *backend);
    ADD_FAILURE() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_gate.weight"), std::string::npos) << e.what();
  }
  c = m.config;
  c.attention_bias = true;  // qwen3 fixture has no q/k/v bias
  EXPECT_THROW(Transformer(c, *m.weights, *backend), Error);
  c = m.config;
  c.tie_word_embeddings = true;  // allowed: output reuses token_embd
  EXPECT_NO_THROW(Transformer(c, *m.weights, *backend));
}

TEST(TransformerApi, BadStepsThrow) {
  LoadedModel m = open_model(fixture_dir("llama2"));
  auto backend = make_cpu_backend(1);
  Transformer t(m.config, *m.weights, *backend);
  EXPECT_EQ(t.kv_cache_bytes_per_block(4, DType::F32), 2 * 2 * 4 * 4 * 16 * 4);
  KvCache cache = t.allocate_kv_cache(8, kBlockSize, DType::F32);
  auto step_for = [&](std::vector<int32_t> tokens) {
    Sequence s;
    s.blocks = {3, 5, 7};
    BlockPool unused(2);
    return make_step({{&s, tokens}}, unused);
  };
  StepInput bad_token = step_for({1, 2, 99999});
  EXPECT_THROW(t.forward(bad_token, cache), Error);
  StepInput bad_pos = step_for({1, 2, 3});
  bad_pos.positions[1] = 7;
  EXPECT_THROW(t.forward(bad_pos, cache), Error);
  StepInput bad_row = step_for({1, 2, 3});
  bad_row.logit_rows = {3};
  EXPECT_THROW(t.forward(bad_row, cache), Error);
  StepInput bad_slot = step_for({1, 2, 3});
  bad_slot.attn.block_tables[0] = 8;  // outside the 8-block cache
  EXPECT_THROW(t.forward(bad_slot, cache), Error);
  // A K/V slot past the cache, refused before any op (and before a recorded
  // step or piece, whose ops do not check again).
  StepInput bad_write = step_for({1, 2, 3});
  bad_write.attn.slot_mapping[2] = 8 * int64_t{cache.block_size};
  try {
    t.forward(bad_write, cache);
    ADD_FAILURE() << "a slot past the cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the cache's"), std::string::npos) << e.what();
  }
  StepInput ok = step_for({1, 2, 3});
  EXPECT_EQ(t.forward(ok, cache).shape(), (std::vector<int64_t>{3, m.config.vocab_size}));
}

}  // namespace
}  // namespace loom
