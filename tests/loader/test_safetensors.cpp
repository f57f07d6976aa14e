// safetensors reader, HF name mapping and HF directory WeightSource tests.
// Files are built in memory (safetensors_writer.h) or in a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "model/loader/hf_names.h"
#include "model/loader/safetensors.h"
#include "model/loader/weights.h"
#include "safetensors_writer.h"

namespace loom {
namespace {

using namespace loom::testing;
namespace fs = std::filesystem;

std::unique_ptr<SafetensorsFile> parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile::from_memory(b.data(), b.size(), "test.safetensors");
}

template <class F>
void expect_error_from(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line: " << e.what();
  }
}

void expect_error(const std::vector<uint8_t>& b, const std::string& needle) {
  expect_error_from([&] { parse(b); }, needle);
}

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("loom_st_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const auto p = (path / name).string();
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string write_text(const std::string& name, const std::string& text) const {
    return write(name, std::vector<uint8_t>(text.begin(), text.end()));
  }
};

TEST(Safetensors, ReadsTensorsOfEverySupportedDType) {
  const auto bytes = build_safetensors(
      {{"a.f32", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
       {"b.f16", "F16", {4}, std::vector<uint8_t>(8, 1)},
       {"c.bf16", "BF16", {1, 1, 2}, std::vector<uint8_t>(4, 2)},
       {"d.i32", "I32", {2}, std::vector<uint8_t>(8, 3)},
       {"e.i64", "I64", {1}, std::vector<uint8_t>(8, 4)},
       {"f.i8", "I8", {3}, std::vector<uint8_t>(3, 5)},
       {"g.scalar", "F32", {}, f32_bytes({7})},
       {"h.empty", "F32", {0, 4}, {}},
       {"i.fp8", "F8_E4M3", {2, 3}, std::vector<uint8_t>(6, 0x38)}},
      {{"format", "pt"}});
  auto f = parse(bytes);
  ASSERT_EQ(f->tensors().size(), 9u);  // __metadata__ is not a tensor
  EXPECT_EQ(f->data_offset() % 8, 0u);
  const auto* a = f->find_tensor("a.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  Tensor t = f->tensor(*a);
  EXPECT_EQ(t.data(), bytes.data() + f->data_offset());
  float v[6];
  std::memcpy(v, t.data(), sizeof v);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(f->find_tensor("b.f16")->dtype, DType::F16);
  EXPECT_EQ(f->find_tensor("c.bf16")->dtype, DType::BF16);
  EXPECT_EQ(f->find_tensor("d.i32")->dtype, DType::I32);
  EXPECT_EQ(f->find_tensor("e.i64")->dtype, DType::I64);
  EXPECT_EQ(f->find_tensor("f.i8")->nbytes, 3u);
  EXPECT_EQ(f->tensor("g.scalar").numel(), 1);
  EXPECT_EQ(f->tensor("h.empty").numel(), 0);
  EXPECT_EQ(f->find_tensor("i.fp8")->dtype, DType::F8_E4M3);
  EXPECT_EQ(f->find_tensor("i.fp8")->nbytes, 6u);
  EXPECT_EQ(f->find_tensor("__metadata__"), nullptr);
  EXPECT_THROW(f->tensor("missing"), Error);
}

TEST(Safetensors, HeaderProblems) {
  expect_error({1, 2, 3}, "too short");
  EXPECT_TRUE(parse(raw_safetensors("{}", 0))->tensors().empty());  // an empty model is fine
  {
    std::vector<uint8_t> b(16, 0);
    const uint64_t n = (100ull << 20) + 1;
    std::memcpy(b.data(), &n, 8);
    expect_error(b, "larger than the 104857600 allowed");
  }
  {
    std::vector<uint8_t> b(16, 0);
    const uint64_t n = 1000;
    std::memcpy(b.data(), &n, 8);
    expect_error(b, "header of 1000 bytes but only 8 follow");
  }
  expect_error(raw_safetensors("[1, 2]", 0), "not a JSON object");
  expect_error(raw_safetensors("{\"a\": ", 0), "invalid JSON");
  expect_error(raw_safetensors("{\"a\": {\"dtype\": \"F32\", \"shape\": [[[1]]], \"data_offsets\": [0, 4]}}", 4),
               "nests deeper than 3 levels");
  expect_error(raw_safetensors(std::string(100000, '[') + std::string(100000, ']'), 0), "not a JSON object");
  expect_error(raw_safetensors("{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0),
               "nests deeper");
  expect_error(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                  "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                               8),
               "duplicate JSON key 'a'");
}

std::vector<uint8_t> one(const std::string& entry, size_t data = 64) {
  return raw_safetensors("{\"model.norm.weight\": " + entry + "}", data);
}

TEST(Safetensors, HostileEntries) {
  expect_error(one(R"({"dtype": "F64", "shape": [1], "data_offsets": [0, 8]})"),
               "tensor 'model.norm.weight' has dtype F64, which loom does not support");
  expect_error(one(R"({"dtype": "F8_E5M2", "shape": [1], "data_offsets": [0, 1]})"), "F8_E5M2");
  expect_error(one(R"({"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 1]})"), "needs 2 bytes");
  expect_error(one(R"({"dtype": 5, "shape": [1], "data_offsets": [0, 4]})"), "dtype that is not a string");
  expect_error(one(R"({"dtype": "F32", "shape": [1]})"), "needs dtype, shape and data_offsets");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1})"),
               "unexpected field 'x'");
  expect_error(one(R"([1])"), "is not a JSON object");
  expect_error(one(R"({"dtype": "F32", "shape": 4, "data_offsets": [0, 4]})"), "shape that is not an array");
  expect_error(one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"), "not a non-negative integer");
  expect_error(one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"), "not a non-negative integer");
  expect_error(one(R"({"dtype": "F32", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 4]})"),
               "9 dimensions");
  expect_error(one(R"({"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4]})"),
               "too large");
  expect_error(one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]})"),
               "too large (size overflow)");
  expect_error(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})"),
               "needs 8 bytes but data_offsets [0, 4] hold 4");
  expect_error(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]})"), "end before begin");
  expect_error(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0]})"), "needs data_offsets [begin, end]");
  expect_error(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]})"), "not a non-negative integer");
  expect_error(one(R"({"dtype": "F32", "shape": [32], "data_offsets": [0, 128]})"),
               "tensor 'model.norm.weight' extends past the end of the file");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 18446744073709551616]})"),
               "not a non-negative integer");  // 2^64 parses as a float
  expect_error(one(R"({"dtype": "F32", "shape": [0], "data_offsets": [18446744073709551615, 18446744073709551615]})"),
               "extends past the end");
  expect_error(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                                   "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                               32),
               "tensors 'a' and 'b' overlap");
  expect_error(raw_safetensors(R"({"": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4),
               "empty name");
}

TEST(Safetensors, EveryTruncationFailsCleanly) {
  const auto full = small_valid_safetensors();
  ASSERT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(SafetensorsFile::from_memory(prefix.data(), prefix.size()), Error) << "length " << n;
  }
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const auto full = small_valid_safetensors();
  std::mt19937 rng(99);
  int ok = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = full;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    try {
      auto f = parse(b);
      for (const auto& t : f->tensors()) (void)f->tensor(t);
      ++ok;
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  EXPECT_GT(ok, 0);
}

TEST(Safetensors, FileConstructorKeepsMappingAlive) {
  TempDir dir;
  const auto path = dir.write("model.safetensors", small_valid_safetensors());
  Tensor t;
  {
    SafetensorsFile f(path);
    EXPECT_EQ(f.path(), path);
    t = f.tensor("model.embed_tokens.weight");
  }
  float v;
  std::memcpy(&v, t.data_as<uint8_t>() + 5 * 4, 4);
  EXPECT_EQ(v, 6.0f);
  auto bad = small_valid_safetensors();
  bad.pop_back();
  const auto trunc = dir.write("trunc.safetensors", bad);
  expect_error_from([&] { SafetensorsFile f(trunc); }, trunc + ": tensor '");
  expect_error_from([&] { SafetensorsFile f((dir.path / "nope.safetensors").string()); }, "nope.safetensors: cannot open");
}

TEST(HfNames, Mapping) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
      {"model.layers.12.self_attn.k_proj.bias", "blk.12.attn_k.bias"},
      {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"},
      {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
      {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
      {"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight"},
      {"model.layers.3.input_layernorm.weight", "blk.3.attn_norm.weight"},
      {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
      {"model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight"},
      {"model.layers.3.mlp.down_proj.weight", "blk.3.ffn_down.weight"},
      {"model.layers.3.post_attention_layernorm.weight", "blk.3.ffn_norm.weight"},
      {"model.language_model.layers.7.mlp.up_proj.weight", "blk.7.ffn_up.weight"},
      {"language_model.model.layers.7.self_attn.o_proj.weight", "blk.7.attn_output.weight"},
      {"language_model.model.embed_tokens.weight", "token_embd.weight"},
      {"model.language_model.norm.weight", "output_norm.weight"},
      {"language_model.lm_head.weight", "output.weight"},
      // FP8 checkpoints: weight and activation scales, KV cache scales.
      {"model.layers.3.self_attn.q_proj.weight_scale", "blk.3.attn_q.weight_scale"},
      {"model.layers.3.mlp.down_proj.weight_scale_inv", "blk.3.ffn_down.weight_scale"},
      {"model.layers.3.mlp.gate_proj.input_scale", "blk.3.ffn_gate.input_scale"},
      {"model.layers.3.self_attn.k_scale", "blk.3.kv_cache.k_scale"},
      {"model.layers.3.self_attn.v_scale", "blk.3.kv_cache.v_scale"},
      {"model.layers.3.self_attn.kv_scale", "blk.3.kv_cache.kv_scale"},
      {"model.layers.3.self_attn.k_proj.output_scale", "blk.3.kv_cache.k_scale"},
      {"model.layers.3.self_attn.v_proj.output_scale", "blk.3.kv_cache.v_scale"},
  };
  for (const auto& [hf, canonical] : cases) {
    const auto got = hf_to_canonical_name(hf, false);
    ASSERT_TRUE(got.has_value()) << hf;
    EXPECT_EQ(*got, canonical) << hf;
  }
  for (const char* ignored :
       {"model.layers.0.self_attn.rotary_emb.inv_freq", "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight",
        "multi_modal_projector.mm_input_projection_weight", "model.layers.x.mlp.up_proj.weight",
        "model.layers..mlp.up_proj.weight", "model.layers.-1.mlp.up_proj.weight", "model.layers.0.mlp.weird.weight",
        "model.layers.0.mlp.up_proj", "lm_head.bias", "model.vision_tower.blocks.0.weight", "",
        "model.layers.0.input_layernorm.weight_scale", "model.layers.0.self_attn.q_proj.output_scale",
        "model.layers.0.self_attn.q_scale", "lm_head.weight_scale"}) {
    EXPECT_FALSE(hf_to_canonical_name(ignored, false).has_value()) << ignored;
  }
  // Gemma 2/3 sandwich norms.
  EXPECT_EQ(*hf_to_canonical_name("model.layers.2.post_attention_layernorm.weight", true),
            "blk.2.post_attention_norm.weight");
  EXPECT_EQ(*hf_to_canonical_name("model.layers.2.pre_feedforward_layernorm.weight", true), "blk.2.ffn_norm.weight");
  EXPECT_EQ(*hf_to_canonical_name("model.layers.2.post_feedforward_layernorm.weight", true),
            "blk.2.post_ffw_norm.weight");
  EXPECT_TRUE(hf_has_sandwich_norms({"model.layers.0.pre_feedforward_layernorm.weight"}));
  EXPECT_FALSE(hf_has_sandwich_norms({"model.layers.0.post_attention_layernorm.weight"}));
}

std::vector<uint8_t> f32_tensor_file(const std::vector<std::string>& names) {
  std::vector<StTensorSpec> specs;
  for (const auto& n : names) specs.push_back({n, "F32", {2}, f32_bytes({1, 2})});
  return build_safetensors(specs);
}

TEST(HfWeights, SingleFileMapsNamesAndIgnoresTheRest) {
  TempDir dir;
  dir.write("model.safetensors",
            f32_tensor_file({"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                             "model.layers.0.self_attn.q_proj.weight", "model.layers.0.post_attention_layernorm.weight",
                             "model.layers.0.self_attn.rotary_emb.inv_freq", "vision_tower.patch_embed.weight"}));
  auto w = open_hf_weights(dir.path.string());
  EXPECT_EQ(w->names(), (std::vector<std::string>{"blk.0.attn_q.weight", "blk.0.ffn_norm.weight", "output.weight",
                                                  "output_norm.weight", "token_embd.weight"}));
  EXPECT_EQ(w->get("token_embd.weight", {2}).dtype(), DType::F32);
  EXPECT_FALSE(w->find("model.embed_tokens.weight").has_value());
}

TEST(HfWeights, GemmaSandwichNormsAndWrappedPrefixes) {
  TempDir dir;
  dir.write("model.safetensors",
            f32_tensor_file({"language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
                             "language_model.model.layers.0.input_layernorm.weight",
                             "language_model.model.layers.0.post_attention_layernorm.weight",
                             "language_model.model.layers.0.pre_feedforward_layernorm.weight",
                             "language_model.model.layers.0.post_feedforward_layernorm.weight",
                             "vision_tower.vision_model.post_layernorm.weight"}));
  auto w = open_hf_weights(dir.path.string());
  EXPECT_EQ(w->names(), (std::vector<std::string>{"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight",
                                                  "blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight",
                                                  "output.weight", "token_embd.weight"}));
}

TEST(HfWeights, TwoNamesForOneCanonicalIsAnError) {
  TempDir dir;
  dir.write("model.safetensors", f32_tensor_file({"model.norm.weight", "model.language_model.norm.weight"}));
  expect_error_from([&] { open_hf_weights(dir.path.string()); }, "both map to 'output_norm.weight'");
}

TEST(HfWeights, ShardedIndex) {
  TempDir dir;
  dir.write("model-00001-of-00002.safetensors",
            f32_tensor_file({"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"}));
  dir.write("model-00002-of-00002.safetensors", f32_tensor_file({"model.norm.weight", "lm_head.weight"}));
  dir.write_text("model.safetensors.index.json", R"({
    "metadata": {"total_size": 32},
    "weight_map": {
      "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.layers.0.mlp.up_proj.weight": "model-00001-of-00002.safetensors",
      "model.norm.weight": "model-00002-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors"
    }})");
  auto w = open_hf_weights(dir.path.string());
  EXPECT_EQ(w->names(), (std::vector<std::string>{"blk.0.ffn_up.weight", "output.weight", "output_norm.weight",
                                                  "token_embd.weight"}));
  Tensor t = w->get("output.weight");
  w.reset();  // the tensor keeps its shard mapped
  float v[2];
  std::memcpy(v, t.data(), sizeof v);
  EXPECT_EQ(v[1], 2.0f);
}

TEST(HfWeights, IndexProblems) {
  auto with_index = [](const std::string& index_json) {
    TempDir dir;
    dir.write("a.safetensors", f32_tensor_file({"model.norm.weight"}));
    dir.write_text("model.safetensors.index.json", index_json);
    open_hf_weights(dir.path.string());
  };
  for (const char* shard : {"../a.safetensors", "/etc/passwd", "sub/a.safetensors", "..", ".", "", "a\\\\b"}) {
    expect_error_from([&] { with_index(std::string(R"({"weight_map": {"model.norm.weight": ")") + shard + "\"}}"); },
                      "is not a plain file name in the model directory");
  }
  expect_error_from([&] { with_index(R"({"weight_map": {"model.norm.weight": "missing.safetensors"}})"); },
                    "missing.safetensors: cannot open");
  expect_error_from([&] { with_index(R"({"weight_map": {"lm_head.weight": "a.safetensors"}})"); },
                    "tensor 'lm_head.weight' is listed in shard 'a.safetensors' but is not in it");
  expect_error_from([&] { with_index(R"({"metadata": {}})"); }, "no weight_map object");
  expect_error_from([&] { with_index(R"({"weight_map": {"model.norm.weight": 3}})"); }, "is not a string");
  expect_error_from([&] { with_index("{\"weight_map\": "); }, "invalid JSON");
  TempDir empty;
  expect_error_from([&] { open_hf_weights(empty.path.string()); }, "no model.safetensors or model.safetensors.index.json");
}

}  // namespace
}  // namespace loom
