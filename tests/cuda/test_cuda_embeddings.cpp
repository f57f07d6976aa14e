// Pooling requests (embeddings) on the CUDA backend: the qwen2_embed fixture
// (scripts/make_embedding_fixtures.py) run in bf16 with recorded decode
// steps, every prompt pooled (last, mean, cls) beside greedy generations in
// prefill chunks, agrees with HF's f32 embeddings (embeddings.json) within
// bf16 rounding, and with the same requests run one at a time; no KV block is
// left in use and the pooling requests sample nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_backend.h"
#include "engine/engine.h"
#include "model/model.h"

namespace loom {
namespace {

const std::string kFixture = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/qwen2_embed";

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return dot / std::sqrt(aa * bb);
}

TEST(CudaEmbeddings, MatchTransformersWhateverTheBatch) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device visible";
  auto backend = make_cuda_backend(0);
  LoadedModel model = open_model(kFixture);
  Transformer transformer(model.config, *model.weights, *backend);
  transformer.enable_step_graphs(64);
  std::ifstream in(kFixture + "/embeddings.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<std::pair<std::string, PoolingType>> kinds = {
      {"last", PoolingType::Last}, {"mean", PoolingType::Mean}, {"cls", PoolingType::Cls}};
  std::vector<Request> reqs;
  for (const auto& [key, type] : kinds)
    for (const auto& prompt : ref["prompts"]) {
      Request r;
      r.prompt_ids = prompt.get<std::vector<int32_t>>();
      r.pooling = PoolingParams{type, true};
      reqs.push_back(r);
      Request gen;  // a generation beside each, decoding while the others prefill
      gen.prompt_ids = r.prompt_ids;
      gen.params.temperature = 0.0f;
      gen.params.max_tokens = 8;
      gen.params.ignore_eos = true;
      reqs.push_back(gen);
    }
  EngineConfig c;
  c.num_kv_blocks = 256;
  c.kv_dtype = DType::BF16;
  c.scheduler.max_num_batched_tokens = 24;  // several prefill chunks per prompt
  c.scheduler.max_num_seqs = 24;            // at most one token each per step
  Engine batched(transformer, nullptr, c);
  const std::vector<Result> got = batched.generate(reqs);
  Engine single(transformer, nullptr, c);
  double worst_ref = 1.0, worst_alone = 1.0;
  size_t at = 0;
  for (const auto& [key, type] : kinds)
    for (size_t p = 0; p < ref["prompts"].size(); ++p, at += 2) {
      ASSERT_EQ(got[at].error, EngineErrorKind::None) << got[at].error_message;
      const std::vector<float>& v = got[at].sequences[0].embedding;
      const std::vector<float> want = ref[key][p].get<std::vector<float>>();
      ASSERT_EQ(v.size(), want.size());
      const double c_ref = cosine(v, want);
      const double c_alone = cosine(v, single.generate({reqs[at]})[0].sequences[0].embedding);
      worst_ref = std::min(worst_ref, c_ref);
      worst_alone = std::min(worst_alone, c_alone);
      EXPECT_GT(c_ref, 0.999) << key << " prompt " << p;
      EXPECT_GT(c_alone, 0.9995) << key << " prompt " << p;
      EXPECT_EQ(got[at + 1].sequences[0].output_ids.size(), 8u);
    }
  std::printf("cuda embeddings: worst cosine vs HF f32 %.6f, batched vs alone %.6f\n", worst_ref,
              worst_alone);
  EXPECT_EQ(batched.stats().generated_tokens, 8u * reqs.size() / 2);
  EXPECT_EQ(batched.stats().kv.used_blocks, 0);
}

}  // namespace
}  // namespace loom
