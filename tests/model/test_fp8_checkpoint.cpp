// FP8 checkpoints on the CPU (tests/fixtures/models/*_fp8_*, made by
// scripts/make_fp8_fixtures.py): what open_model reads from them, the errors
// of broken copies (a missing or misshapen scale, FP8 tensors without a
// quantization_config), and an FP8 E4M3 KV cache holding the checkpoint's
// per-layer scales against the f32 cache on the same model (the attention
// on FP8 caches itself is checked exactly in tests/backend/test_attention.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/paged_step.h"
#include "../loader/safetensors_writer.h"
#include "core/error.h"
#include "model/loader/safetensors.h"
#include "model/loader/weights.h"
#include "model/model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return testing::model_fixture_dir(name);
}

// A copy of a fixture directory in which `edit` may rewrite the config and
// the tensors (name -> spec) before they are written back.
struct EditedCopy {
  fs::path dir;
  EditedCopy(
      const std::string& name, const std::function<void(nlohmann::json&)>& edit_config,
      const std::function<void(std::map<std::string, testing::StTensorSpec>&)>& edit_tensors) {
    static int n = 0;
    dir = fs::temp_directory_path() /
          ("loom_fp8_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(fixture(name) + "/config.json"));
    edit_config(cfg);
    std::ofstream(dir / "config.json") << cfg.dump();
    SafetensorsFile f(fixture(name) + "/model.safetensors");
    std::map<std::string, testing::StTensorSpec> specs;
    for (const auto& t : f.tensors()) {
      const auto* p = static_cast<const uint8_t*>(f.tensor(t).data());
      static const std::map<DType, const char*> kNames = {{DType::F32, "F32"},
                                                          {DType::F8_E4M3, "F8_E4M3"},
                                                          {DType::BF16, "BF16"},
                                                          {DType::F16, "F16"}};
      specs[t.name] = {t.name, kNames.at(t.dtype),
                       std::vector<uint64_t>(t.shape.begin(), t.shape.end()),
                       std::vector<uint8_t>(p, p + t.nbytes)};
    }
    edit_tensors(specs);
    std::vector<testing::StTensorSpec> list;
    for (auto& [_, s] : specs) list.push_back(s);
    const auto bytes = testing::build_safetensors(list);
    std::ofstream(dir / "model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  ~EditedCopy() { fs::remove_all(dir); }
};

void expect_load_error(const EditedCopy& copy, const char* fragment) {
  auto backend = make_cpu_backend(1);
  try {
    LoadedModel m = open_model(copy.dir.string());
    Transformer t(m.config, *m.weights, *backend);
    ADD_FAILURE() << "expected an error containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Fp8Checkpoint, ReadsEachFormat) {
  struct Case {
    const char* name;
    Fp8WeightScale scale;
    Fp8Activation activation;
    bool kv;
  };
  for (const Case& c :
       {Case{"llama3_fp8_block", Fp8WeightScale::Block, Fp8Activation::DynamicGroup, false},
        Case{"qwen2_fp8_channel", Fp8WeightScale::Channel, Fp8Activation::DynamicToken, false},
        Case{"llama3_fp8_static", Fp8WeightScale::Tensor, Fp8Activation::Static, true}}) {
    SCOPED_TRACE(c.name);
    LoadedModel m = open_model(fixture(c.name));
    const QuantizationConfig& q = m.config.quantization;
    EXPECT_TRUE(q.fp8);
    EXPECT_EQ(q.weight_scale, c.scale);
    EXPECT_EQ(q.activation, c.activation);
    EXPECT_EQ(q.kv_cache_scales, c.kv);
    EXPECT_EQ(m.weights->get("blk.1.ffn_down.weight").dtype(), DType::F8_E4M3);
    EXPECT_TRUE(m.weights->find("blk.1.ffn_down.weight_scale").has_value());
    EXPECT_EQ(m.weights->find("blk.0.attn_q.input_scale").has_value(),
              c.activation == Fp8Activation::Static);
    EXPECT_EQ(m.weights->find("blk.0.kv_cache.k_scale").has_value(), c.kv);
    EXPECT_NE(m.weights->get("output_norm.weight").dtype(), DType::F8_E4M3);
  }
  // The block fixture's scales are [ceil(N / 128), ceil(K / 128)]: MLP 320 x hidden 192.
  LoadedModel m = open_model(fixture("llama3_fp8_block"));
  EXPECT_EQ(m.weights->get("blk.0.ffn_up.weight_scale").shape(), (std::vector<int64_t>{3, 2}));
}

TEST(Fp8Checkpoint, BrokenCopiesFailClearly) {
  auto keep = [](nlohmann::json&) {};
  auto keep_tensors = [](std::map<std::string, testing::StTensorSpec>&) {};
  expect_load_error(EditedCopy(
                        "llama3_fp8_block",
                        [](nlohmann::json& c) { c.erase("quantization_config"); }, keep_tensors),
                    "is FP8 but config.json has no FP8 quantization_config");
  expect_load_error(
      EditedCopy("llama3_fp8_block", keep,
                 [](auto& t) { t.erase("model.layers.1.mlp.up_proj.weight_scale_inv"); }),
      "model has no tensor 'blk.1.ffn_up.weight_scale'");
  expect_load_error(EditedCopy("qwen2_fp8_channel", keep,
                               [](auto& t) {
                                 auto& s = t.at("model.layers.0.self_attn.o_proj.weight_scale");
                                 s.shape = {2};
                                 s.data.resize(8);
                               }),
                    "tensor 'blk.0.attn_output.weight_scale' has 2 values");
  expect_load_error(
      EditedCopy("llama3_fp8_static", keep,
                 [](auto& t) { t.erase("model.layers.0.mlp.gate_proj.input_scale"); }),
      "model has no tensor 'blk.0.ffn_gate.input_scale'");
  expect_load_error(EditedCopy("llama3_fp8_static", keep,
                               [](auto& t) {
                                 auto& s = t.at("model.layers.1.self_attn.q_proj.weight_scale");
                                 const float bad = -1.0f;
                                 std::memcpy(s.data.data(), &bad, 4);
                               }),
                    "scales must be finite and > 0");
  expect_load_error(EditedCopy("llama3_fp8_static", keep,
                               [](auto& t) {
                                 auto& s = t.at("model.layers.1.self_attn.k_scale");
                                 s.shape = {3};
                                 const std::vector<uint8_t> one = s.data;
                                 for (int i = 0; i < 2; ++i)
                                   s.data.insert(s.data.end(), one.begin(), one.end());
                               }),
                    "KV cache scales are one value or one per KV head");
  expect_load_error(EditedCopy(
                        "llama3_fp8_static",
                        [](nlohmann::json& c) { c["quantization_config"]["quant_method"] = "awq"; },
                        keep_tensors),
                    "quant_method 'awq' is not supported");
}

TEST(Fp8Checkpoint, QuantizingAtLoadNeedsAnFp8Backend) {
  LoadedModel m = open_model(fixture("llama3"));
  m.config.quantization = online_fp8_quantization();
  auto backend = make_cpu_backend(1);
  try {
    Transformer t(m.config, *m.weights, *backend);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--quantization fp8 needs the CUDA backend"),
              std::string::npos)
        << e.what();
  }
}

// The static fixture with an FP8 KV cache (its calibrated k/v scales) against
// the f32 cache: every row within 15% of the row's logit range (E4M3 keeps 3
// mantissa bits: K and V move by up to 2^-4 relative, and this random
// fixture's logits are sensitive), and the same greedy token wherever the
// f32 logits' top-2 margin is clear of the row's difference.
TEST(Fp8Checkpoint, Fp8KvCacheWithCheckpointScales) {
  LoadedModel m = open_model(fixture("llama3_fp8_static"));
  auto backend = make_cpu_backend(2);
  Transformer t(m.config, *m.weights, *backend);
  const testing::ModelReference ref = testing::load_model_reference("llama3_fp8_static");
  KvCache f32 = t.allocate_kv_cache(32, 4, DType::F32);
  KvCache fp8 = t.allocate_kv_cache(32, 4, DType::F8_E4M3);
  ASSERT_EQ(fp8.layers[0].k_scale.numel(), m.config.num_kv_heads);
  const float k_scale = fp8.layers[1].k_scale.data_as<const float>()[0];
  EXPECT_NE(k_scale, 1.0f);  // the checkpoint's, not the default
  EXPECT_EQ(k_scale, m.weights->get("blk.1.kv_cache.k_scale").data_as<const float>()[0]);
  const auto& prompt = ref.prompts[2];
  auto run = [&](KvCache& cache) {
    testing::ShuffledBlockPool pool(32, 3);
    testing::PagedSequence seq;
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < prompt.size(); i += 5) {  // chunks: later ones read the quantised prefix
      const size_t e = std::min(prompt.size(), i + 5);
      auto step =
          testing::make_paged_step({{&seq, {prompt.begin() + i, prompt.begin() + e}}}, pool, 4);
      for (auto& r : testing::logits_to_rows(*backend, t.forward(step, cache)))
        rows.push_back(std::move(r));
    }
    return rows;
  };
  const auto want = run(f32), got = run(fp8);
  ASSERT_EQ(got.size(), want.size());
  float worst = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    float lo = want[r][0], hi = want[r][0], d = 0;
    for (size_t j = 0; j < want[r].size(); ++j) {
      lo = std::min(lo, want[r][j]);
      hi = std::max(hi, want[r][j]);
      d = std::max(d, std::fabs(got[r][j] - want[r][j]));
    }
    const float tol = 0.15f * (hi - lo);
    worst = std::max(worst, d / tol);
    EXPECT_LE(d, tol) << "row " << r;
    auto sorted = want[r];
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 2 * d) {
      EXPECT_EQ(testing::argmax(got[r]), testing::argmax(want[r])) << "row " << r;
    }
  }
  std::printf("fp8 KV cache vs f32: worst |dlogit| / (0.15 * logit range) = %.3f\n", worst);
}

}  // namespace
}  // namespace loom
