// Embeddings against HF transformers: the qwen2_embed fixture
// (scripts/make_embedding_fixtures.py) is a tiny random Qwen2 laid out as a
// sentence-transformers model with mean pooling; its embeddings.json holds
// HF's last-token, mean and cls embeddings (final-norm hidden states,
// L2-normalised) of a few prompts. loom's engine embeds every prompt with
// every pooling at once, in prefill chunks beside each other, and must agree:
// cosine > 0.9999 and a small max |difference|.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"

namespace loom {
namespace {

const std::string kFixture = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/qwen2_embed";

TEST(EmbeddingReference, MatchesTransformers) {
  LoadedModel model = open_model(kFixture);
  EXPECT_EQ(model.pooling.type, PoolingType::Mean)
      << "the fixture's 1_Pooling/config.json says mean";
  auto backend = make_cpu_backend(2);
  Transformer transformer(model.config, *model.weights, *backend);
  EngineConfig c;
  c.block_size = 4;
  c.num_kv_blocks = 256;
  c.scheduler.max_num_batched_tokens = 16;  // prompts up to 47 tokens: several chunks each
  c.scheduler.max_num_seqs = 16;
  Engine engine(transformer, nullptr, c);

  std::ifstream in(kFixture + "/embeddings.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  struct Case {
    std::string key;
    PoolingParams params;
  };
  const std::vector<Case> cases = {{"last", {PoolingType::Last, true}},
                                   {"mean", {PoolingType::Mean, true}},
                                   {"cls", {PoolingType::Cls, true}},
                                   {"mean_unnormalized", {PoolingType::Mean, false}}};
  std::vector<Request> requests;
  for (const Case& k : cases)
    for (const auto& prompt : ref["prompts"]) {
      Request r;
      r.prompt_ids = prompt.get<std::vector<int32_t>>();
      r.pooling = k.params;
      requests.push_back(r);
    }
  const std::vector<Result> results = engine.generate(requests);
  size_t at = 0;
  double worst_cos = 1.0, worst_diff = 0.0;
  for (const Case& k : cases)
    for (size_t p = 0; p < ref["prompts"].size(); ++p, ++at) {
      const Result& res = results[at];
      ASSERT_EQ(res.error, EngineErrorKind::None) << res.error_message;
      const std::vector<float>& got = res.sequences[0].embedding;
      const std::vector<float> want = ref[k.key][p].get<std::vector<float>>();
      ASSERT_EQ(got.size(), want.size()) << k.key << " prompt " << p;
      double dot = 0, gg = 0, ww = 0, diff = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        dot += double(got[i]) * want[i];
        gg += double(got[i]) * got[i];
        ww += double(want[i]) * want[i];
        diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
      }
      const double cos = dot / std::sqrt(gg * ww);
      worst_cos = std::min(worst_cos, cos);
      worst_diff = std::max(worst_diff, diff);
      EXPECT_GT(cos, 0.9999) << k.key << " prompt " << p;
      EXPECT_LT(diff, 1e-4) << k.key << " prompt " << p;
    }
  std::printf("embeddings vs HF: worst cosine %.9f, worst max |diff| %.3g\n", worst_cos,
              worst_diff);
  EXPECT_EQ(engine.stats().generated_tokens, 0u);
  EXPECT_EQ(engine.stats().kv.used_blocks, 0);
}

}  // namespace
}  // namespace loom
