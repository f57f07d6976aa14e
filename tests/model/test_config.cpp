// Config parsing: HF config.json in both rope spellings, nested text_config,
// sliding-window layer types and patterns, per-arch defaults, GGUF metadata,
// and clear errors for bad values.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "../loader/gguf_writer.h"
#include "core/error.h"
#include "model/arch/arch.h"
#include "model/config.h"
#include "model/pooling_config.h"
#include "model/loader/gguf.h"

namespace loom {
namespace {

using nlohmann::json;

// Meta-Llama-3.1-8B's config.json (old spelling, llama3 rope scaling).
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// google/gemma-3-4b-it's config.json: the text model nested, most keys left to defaults.
const char* kGemma3Multimodal = R"({
  "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
  "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
  "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
  "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                  "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                  "sliding_window": 1024},
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
  "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                    "model_type": "siglip_vision_model", "num_attention_heads": 16,
                    "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false}})";

json base_llama() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 300, "hidden_size": 64,
                         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
                         "rope_theta": 10000.0})");
}

// Runs f, expecting a loom::Error whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected loom::Error";
  } catch (const Error& e) {
    for (const char* frag : fragments)
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << "message: " << e.what();
  }
}

TEST(HfConfig, Llama31) {
  ModelConfig c = model_config_from_hf_text(kLlama31);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.scaling, RopeScalingType::Llama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position, 8192);
  EXPECT_EQ(c.rope.rotary_dim, 128);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.any_sliding());
  EXPECT_EQ(c.activation, Activation::Silu);
  // Llama 3 scaling: the highest frequency is untouched, the lowest divided by factor.
  const auto f = c.rope.inv_freq();
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[63], 1.0 / std::pow(500000.0, 126.0 / 128) / 8.0, 1e-12);
}

TEST(HfConfig, Llama2LinearTypeKeyAndDefaults) {
  json j = base_llama();
  j.erase("num_key_value_heads");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = model_config_from_hf(j);
  EXPECT_EQ(c.num_kv_heads, 4);  // absent: MHA
  EXPECT_EQ(c.head_dim, 16);     // absent: hidden / heads
  EXPECT_EQ(c.rope.scaling, RopeScalingType::Linear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
  EXPECT_FLOAT_EQ(c.rope.inv_freq()[0], 0.5f);
}

TEST(HfConfig, RopeParametersSpelling) {
  json j = base_llama();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0},
                          {"original_max_position_embeddings", 64}};
  ModelConfig c = model_config_from_hf(j);
  EXPECT_EQ(c.rope.scaling, RopeScalingType::Yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.original_max_position, 64);
  EXPECT_NEAR(c.rope.attention_scale(), 0.1 * std::log(4.0) + 1.0, 1e-6);
  EXPECT_EQ(c.rope_local.scaling, RopeScalingType::Yarn);

  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  c = model_config_from_hf(j);
  EXPECT_EQ(c.rope.scaling, RopeScalingType::None);
  EXPECT_DOUBLE_EQ(c.rope.theta, 5e5);
}

TEST(HfConfig, PartialRotary) {
  json j = base_llama();
  j["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(model_config_from_hf(j).rope.rotary_dim, 8);
}

TEST(HfConfig, Gemma3NestedTextConfigTakesDefaults) {
  ModelConfig c = model_config_from_hf_text(kGemma3Multimodal);
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.num_layers, 34);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.norm_weight_plus_one);
  EXPECT_TRUE(c.sandwich_norm);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / 16.0f);  // 256^-0.5
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(2560.0f));
  EXPECT_EQ(c.sliding_window, 1024);
  ASSERT_EQ(c.layer_is_sliding.size(), 34u);
  for (int i = 0; i < 34; ++i) EXPECT_EQ(c.layer_is_sliding[i], (i + 1) % 6 != 0) << i;
  // rope_scaling applies to global layers only; local layers use 10k unscaled.
  EXPECT_EQ(c.rope.scaling, RopeScalingType::Linear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope_local.scaling, RopeScalingType::None);
  EXPECT_DOUBLE_EQ(c.rope_local.theta, 10000.0);
  EXPECT_EQ(&c.rope_for_layer(5), &c.rope);
  EXPECT_EQ(&c.rope_for_layer(0), &c.rope_local);
  EXPECT_EQ(c.final_logit_softcap, 0.0f);
}

TEST(HfConfig, Gemma3LayerTypesAndPerTypeRope) {
  json j = json::parse(R"({"architectures": ["Gemma3ForCausalLM"], "vocab_size": 100, "hidden_size": 32,
     "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
     "head_dim": 16, "query_pre_attn_scalar": 64, "sliding_window": 8,
     "final_logit_softcapping": 30.0, "attn_logit_softcapping": null,
     "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
     "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0},
                         "sliding_attention": {"rope_type": "default"}}})");
  ModelConfig c = model_config_from_hf(j);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{false, true, true, false}));
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.scaling, RopeScalingType::Linear);
  EXPECT_DOUBLE_EQ(c.rope_local.theta, 10000.0);  // from rope_local_base_freq's default
  EXPECT_EQ(c.rope_local.scaling, RopeScalingType::None);
  EXPECT_FLOAT_EQ(c.attention_scale, 0.125f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_FLOAT_EQ(c.attn_logit_softcap, 0.0f);  // gemma3 ignores it, as HF does
}

TEST(HfConfig, Gemma3SlidingWindowPattern) {
  json j = json::parse(R"({"architectures": ["Gemma3ForCausalLM"], "vocab_size": 100, "hidden_size": 32,
     "intermediate_size": 64, "num_hidden_layers": 7, "num_attention_heads": 2, "num_key_value_heads": 1,
     "head_dim": 16, "sliding_window": 8, "sliding_window_pattern": 3, "rope_theta": 1e6,
     "rope_local_base_freq": 20000.0})");
  ModelConfig c = model_config_from_hf(j);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{true, true, false, true, true, false, true}));
  EXPECT_DOUBLE_EQ(c.rope_local.theta, 20000.0);
}

TEST(HfConfig, QwenAndMistral) {
  json j = base_llama();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["tie_word_embeddings"] = true;
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = false;
  ModelConfig c = model_config_from_hf(j);
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.any_sliding());

  j["use_sliding_window"] = true;
  j["max_window_layers"] = 1;
  c = model_config_from_hf(j);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{false, true}));

  j = base_llama();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 32;
  c = model_config_from_hf(j);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 32);

  j = base_llama();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = 16;
  c = model_config_from_hf(j);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{true, true}));
  EXPECT_EQ(c.sliding_window, 16);
  j["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  c = model_config_from_hf(j);
  EXPECT_FALSE(c.any_sliding());
  j.erase("sliding_window");  // absent: HF's default of 4096
  EXPECT_EQ(model_config_from_hf(j).sliding_window, 4096);
}

TEST(HfConfig, ModelTypeWithoutArchitectures) {
  json j = base_llama();
  j.erase("architectures");
  j["model_type"] = "qwen3";
  EXPECT_EQ(model_config_from_hf(j).arch, "qwen3");
}

TEST(HfConfig, Errors) {
  expect_error([] { model_config_from_hf_text("{not json"); }, {"not valid JSON"});
  expect_error([] { model_config_from_hf_text("[1, 2]"); }, {"JSON object"});
  {
    json j = base_llama();
    j["architectures"] = {"FalconForCausalLM"};
    expect_error([&] { model_config_from_hf(j); },
                 {"unsupported architecture 'FalconForCausalLM'", "LlamaForCausalLM", "Gemma3ForCausalLM"});
  }
  {
    json j = base_llama();
    j.erase("architectures");
    expect_error([&] { model_config_from_hf(j); }, {"names no architecture"});
  }
  auto bad = [](const char* key, json value, std::initializer_list<const char*> fragments) {
    json j = base_llama();
    j[key] = std::move(value);
    expect_error([&] { model_config_from_hf(j); }, fragments);
  };
  bad("hidden_size", -64, {"'hidden_size'", "-64"});
  bad("hidden_size", "64", {"'hidden_size' must be an integer"});
  bad("hidden_size", 64.5, {"'hidden_size' must be an integer"});
  bad("vocab_size", 1e12, {"'vocab_size'"});
  bad("num_hidden_layers", 100000, {"'num_hidden_layers'"});
  bad("num_key_value_heads", 3, {"num_heads 4 is not a multiple of num_kv_heads 3"});
  bad("num_attention_heads", 0, {"'num_attention_heads'"});
  bad("rms_norm_eps", 2.0, {"'rms_norm_eps'"});
  bad("rope_theta", -1.0, {"'rope_theta'"});
  bad("hidden_act", "relu", {"'hidden_act'", "not a supported activation"});
  bad("mlp_bias", true, {"mlp_bias"});
  bad("rope_scaling", json{{"rope_type", "dynamic"}, {"factor", 2.0}}, {"rope type", "dynamic"});
  bad("rope_scaling", json{{"rope_type", "linear"}}, {"factor"});
  bad("rope_scaling", json{{"rope_type", "llama3"}, {"factor", 8.0}}, {"original_max_position_embeddings"});
  bad("rope_scaling", json{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                           {"high_freq_factor", 1.0}, {"original_max_position_embeddings", 8192}},
      {"low_freq_factor"});
  bad("rope_scaling", "linear", {"'rope_scaling' must be an object"});
  bad("head_dim", 15, {"rotary dim"});
  bad("num_attention_heads", 3, {"head_dim"});  // 64 % 3: head_dim needed
  {
    json j = base_llama();
    j["architectures"] = {"Gemma3ForCausalLM"};
    j["layer_types"] = {"sliding_attention"};
    expect_error([&] { model_config_from_hf(j); }, {"'layer_types'", "2 layer types"});
    j["layer_types"] = {"sliding_attention", "chunked_attention"};
    expect_error([&] { model_config_from_hf(j); }, {"chunked_attention"});
    j["layer_types"] = {"sliding_attention", "full_attention"};
    j["sliding_window"] = nullptr;
    expect_error([&] { model_config_from_hf(j); }, {"sliding_window is not set"});
  }
}

TEST(Registry, OneTable) {
  EXPECT_EQ(arch_registry().size(), 5u);
  EXPECT_EQ(find_arch_by_hf_architecture("Gemma3ForConditionalGeneration")->name, "gemma3");
  EXPECT_EQ(find_arch_by_gguf_name("qwen3")->name, "qwen3");
  EXPECT_EQ(find_arch_by_gguf_name("gpt2"), nullptr);
}

// --- GGUF metadata ---

using testing::GgufWriter;
using testing::gv_arr;
using testing::gv_f;
using testing::gv_str;
using testing::gv_u;

GgufWriter llama_gguf(const std::string& arch = "llama") {
  GgufWriter w;
  w.kv("general.architecture", gv_str(arch));
  w.kv(arch + ".embedding_length", gv_u(GgufType::U32, 64));
  w.kv(arch + ".block_count", gv_u(GgufType::U32, 6));
  w.kv(arch + ".feed_forward_length", gv_u(GgufType::U32, 128));
  w.kv(arch + ".attention.head_count", gv_u(GgufType::U32, 4));
  w.kv(arch + ".attention.head_count_kv", gv_u(GgufType::U32, 2));
  w.kv(arch + ".attention.layer_norm_rms_epsilon", gv_f(GgufType::F32, 1e-5));
  w.kv(arch + ".rope.freq_base", gv_f(GgufType::F32, 500000.0));
  w.kv(arch + ".context_length", gv_u(GgufType::U32, 2048));
  std::vector<GgufValue> tokens;
  for (int i = 0; i < 50; ++i) tokens.push_back(gv_str(fmt::format("t{}", i)));
  w.kv("tokenizer.ggml.tokens", gv_arr(GgufType::STRING, tokens));
  return w;
}

ModelConfig gguf_config(const GgufWriter& w) {
  const auto bytes = w.build();
  auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  return model_config_from_gguf(*file);
}

TEST(GgufConfig, Llama) {
  GgufWriter w = llama_gguf();
  std::vector<uint8_t> factors(8 * 4);
  for (int i = 0; i < 8; ++i) {
    const float f = i < 4 ? 1.0f : 8.0f;
    std::memcpy(factors.data() + i * 4, &f, 4);
  }
  w.tensor("rope_freqs.weight", {8}, 0, factors);
  ModelConfig c = gguf_config(w);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.vocab_size, 50);  // from the token list
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope.rotary_dim, 16);
  EXPECT_EQ(c.max_position, 2048);
  EXPECT_TRUE(c.rope.interleaved);
  EXPECT_TRUE(c.tie_word_embeddings);  // no output.weight
  ASSERT_EQ(c.rope.freq_factors.size(), 8u);
  const auto f = c.rope.inv_freq();
  EXPECT_FLOAT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[7], 1.0 / std::pow(500000.0, 14.0 / 16) / 8.0, 1e-12);
}

TEST(GgufConfig, Qwen2AndExplicitVocab) {
  GgufWriter w = llama_gguf("qwen2");
  w.kv("qwen2.vocab_size", gv_u(GgufType::U32, 77));
  ModelConfig c = gguf_config(w);
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_EQ(c.vocab_size, 77);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_TRUE(c.attention_bias);
}

TEST(GgufConfig, Gemma3) {
  GgufWriter w = llama_gguf("gemma3");
  w.kv("gemma3.attention.key_length", gv_u(GgufType::U32, 32));
  w.kv("gemma3.attention.value_length", gv_u(GgufType::U32, 32));
  w.kv("gemma3.attention.sliding_window", gv_u(GgufType::U32, 512));
  w.kv("gemma3.rope.scaling.type", gv_str("linear"));
  w.kv("gemma3.rope.scaling.factor", gv_f(GgufType::F32, 8.0));
  ModelConfig c = gguf_config(w);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_FALSE(c.norm_weight_plus_one);  // the converter stored (1 + w)
  EXPECT_TRUE(c.sandwich_norm);
  EXPECT_FALSE(c.rope.interleaved);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{true, true, true, true, true, false}));
  EXPECT_EQ(c.rope.scaling, RopeScalingType::Linear);
  EXPECT_EQ(c.rope_local.scaling, RopeScalingType::None);
  EXPECT_DOUBLE_EQ(c.rope_local.theta, 10000.0);
  EXPECT_FLOAT_EQ(c.attention_scale, 1.0f / std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(c.embedding_scale, 8.0f);
}

TEST(GgufConfig, Errors) {
  {
    GgufWriter w = llama_gguf();
    w.kvs[0].second = gv_str("falcon");
    expect_error([&] { gguf_config(w); }, {"unsupported architecture 'falcon'", "llama", "gemma3"});
  }
  {
    GgufWriter w = llama_gguf();
    w.kvs.erase(w.kvs.begin() + 1);  // embedding_length
    expect_error([&] { gguf_config(w); }, {"llama.embedding_length"});
  }
  {
    GgufWriter w = llama_gguf();
    w.kvs.pop_back();  // tokens
    expect_error([&] { gguf_config(w); }, {"vocab"});
  }
  {
    GgufWriter w = llama_gguf();
    w.kv("llama.rope.scaling.type", gv_str("longrope"));
    expect_error([&] { gguf_config(w); }, {"longrope"});
  }
  {
    GgufWriter w = llama_gguf();
    w.kvs[2].second = gv_u(GgufType::U32, 1u << 20);  // block_count
    expect_error([&] { gguf_config(w); }, {"block_count"});
  }
}

PoolingConfig from_gguf(std::optional<uint32_t> pooling_type) {
  GgufWriter w = llama_gguf("qwen2");
  if (pooling_type) w.kv("qwen2.pooling_type", gv_u(GgufType::U32, *pooling_type));
  const auto bytes = w.build();
  auto file = GgufFile::from_memory(bytes.data(), bytes.size());
  return pooling_config_from_gguf(*file);
}

TEST(GgufConfig, PoolingType) {
  EXPECT_EQ(from_gguf(std::nullopt).type, PoolingType::Last);
  EXPECT_EQ(from_gguf(0).type,
            PoolingType::Last);  // none: per-token outputs; a decoder pools its last
  EXPECT_EQ(from_gguf(1).type, PoolingType::Mean);
  EXPECT_EQ(from_gguf(2).type, PoolingType::Cls);
  EXPECT_EQ(from_gguf(3).type, PoolingType::Last);
  EXPECT_EQ(from_gguf(1).source, "GGUF qwen2.pooling_type");
  EXPECT_THROW(from_gguf(4), Error);  // rank
  EXPECT_THROW(from_gguf(9), Error);
}

}  // namespace
}  // namespace loom
