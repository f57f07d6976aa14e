// quantization_config in config.json: the HF "fp8" method (per-tensor,
// 128x128 blocks, static or dynamic activations) and compressed-tensors FP8
// schemes (FP8, FP8_DYNAMIC, block), as real checkpoints spell them; every
// scheme loom cannot run fails with a message naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace loom {
namespace {

using nlohmann::json;

json with_quant(const char* quant) {
  json c =
      json::parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 300, "hidden_size": 64,
                           "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "max_position_embeddings": 256})");
  c["quantization_config"] = json::parse(quant);
  return c;
}

QuantizationConfig parse(const char* quant) {
  return model_config_from_hf(with_quant(quant)).quantization;
}

void expect_error(const char* quant, std::initializer_list<const char*> fragments) {
  try {
    parse(quant);
    ADD_FAILURE() << "expected loom::Error for " << quant;
  } catch (const Error& e) {
    for (const char* f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "message: " << e.what();
  }
}

// compressed-tensors' FP8_DYNAMIC preset (e.g. RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic).
const char* kCtFp8Dynamic = R"({
  "config_groups": {"group_0": {
    "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
                          "num_bits": 8, "observer": null, "observer_kwargs": {}, "strategy": "token",
                          "symmetric": true, "type": "float"},
    "output_activations": null, "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null, "num_bits": 8,
                "observer": "minmax", "observer_kwargs": {}, "strategy": "channel", "symmetric": true,
                "type": "float"}}},
  "format": "float-quantized", "global_compression_ratio": 1.24, "ignore": ["lm_head"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"})";

// compressed-tensors' FP8 preset (static per-tensor activations) with FP8 KV cache scales.
const char* kCtFp8Static = R"({
  "config_groups": {"group_0": {
    "input_activations": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true,
                          "type": "float"},
    "targets": ["Linear"],
    "weights": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true, "type": "float"}}},
  "format": "naive-quantized", "ignore": ["lm_head"],
  "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "strategy": "tensor", "symmetric": true, "type": "float"},
  "quant_method": "compressed-tensors", "quantization_status": "frozen"})";

TEST(QuantizationConfig, NoneWhenAbsent) {
  json c = with_quant("{}");
  c.erase("quantization_config");
  EXPECT_FALSE(model_config_from_hf(c).quantization.fp8);
  c["quantization_config"] = nullptr;
  EXPECT_FALSE(model_config_from_hf(c).quantization.fp8);
}

TEST(QuantizationConfig, HfFp8Block) {
  // Qwen3-8B-FP8 / DeepSeek-V3 style.
  const auto q = parse(R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                           "weight_block_size": [128, 128]})");
  EXPECT_TRUE(q.fp8);
  EXPECT_EQ(q.source, "fp8");
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Block);
  EXPECT_EQ(q.block_n, 128);
  EXPECT_EQ(q.block_k, 128);
  EXPECT_EQ(q.activation, Fp8Activation::DynamicGroup);
  EXPECT_FALSE(q.quantize_at_load);
  EXPECT_EQ(
      q.describe(),
      "fp8 e4m3 (fp8): 128x128 block weight scales, dynamic per-token 1x128-group activations");
}

TEST(QuantizationConfig, HfFp8PerTensor) {
  auto q = parse(
      R"({"activation_scheme": "static", "ignored_layers": ["lm_head"], "quant_method": "fp8"})");
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Tensor);
  EXPECT_EQ(q.activation, Fp8Activation::Static);
  q = parse(R"({"quant_method": "fp8"})");
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Tensor);
  EXPECT_EQ(q.activation, Fp8Activation::DynamicToken);
}

TEST(QuantizationConfig, CompressedTensors) {
  auto q = parse(kCtFp8Dynamic);
  EXPECT_EQ(q.source, "compressed-tensors");
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Channel);
  EXPECT_EQ(q.activation, Fp8Activation::DynamicToken);
  EXPECT_FALSE(q.kv_cache_scales);
  q = parse(kCtFp8Static);
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Tensor);
  EXPECT_EQ(q.activation, Fp8Activation::Static);
  EXPECT_TRUE(q.kv_cache_scales);
  q = parse(
      R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {
      "targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128],
                  "dynamic": false, "symmetric": true},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                            "dynamic": true, "symmetric": true}}}})");
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Block);
  EXPECT_EQ(q.activation, Fp8Activation::DynamicGroup);
}

TEST(QuantizationConfig, OnlineFp8) {
  const auto q = online_fp8_quantization();
  EXPECT_TRUE(q.fp8 && q.quantize_at_load);
  EXPECT_EQ(q.weight_scale, Fp8WeightScale::Channel);
  EXPECT_EQ(q.activation, Fp8Activation::DynamicToken);
}

TEST(QuantizationConfig, UnsupportedSchemesAreNamed) {
  expect_error(R"({"quant_method": "awq", "bits": 4})", {"quant_method 'awq' is not supported"});
  expect_error(R"({"quant_method": "gptq"})", {"'gptq'"});
  expect_error(R"({"bits": 4})", {"'quant_method' is required"});
  expect_error(R"({"quant_method": "fp8", "fmt": "e5m2"})", {"'fmt'", "e4m3"});
  expect_error(R"({"quant_method": "fp8", "weight_block_size": [64, 64]})",
               {"weight_block_size", "[128, 128]"});
  expect_error(
      R"({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "static"})",
      {"activation_scheme", "dynamic"});
  expect_error(R"({"quant_method": "fp8", "activation_scheme": "fancy"})", {"activation_scheme"});
  // compressed-tensors int4 (W4A16): named by bits, type and strategy.
  expect_error(
      R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}})",
      {"'format'", "pack-quantized"});
  expect_error(
      R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {
      "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
      "input_activations": null}}})",
      {"4-bit int quantisation (strategy group) is not supported"});
  expect_error(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})",
               {"weight-only FP8"});
  expect_error(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true}}}})",
               {"8-bit int"});
  expect_error(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                            "dynamic": true}}}})",
               {"needs block-wise weights"});
  expect_error(R"({"quant_method": "compressed-tensors", "config_groups": {
      "a": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}},
      "b": {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false}}}})",
               {"different FP8 schemes"});
  expect_error(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}},
      "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true}})",
               {"kv_cache_scheme", "dynamic"});
  expect_error(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}},
      "sparsity_config": {"format": "sparse-24-bitmask"}})",
               {"sparsity_config"});
}

}  // namespace
}  // namespace loom
