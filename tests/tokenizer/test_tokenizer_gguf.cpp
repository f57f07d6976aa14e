// GGUF tokenizers: the real vocabularies of the default models against HF
// transformers' tokenizer built from the same file (fixtures gguf_*.json from
// scripts/make_tokenizer_fixtures.py --gguf), skipped when the model is not
// present; and small synthetic GGUF files for loader behaviour and errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "fixture_util.h"
#include "model/loader/gguf.h"
#include "tokenizer/tokenizer.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string models_dir() {
  const char* env = std::getenv("LOOM_TEST_MODELS_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(LOOM_SOURCE_DIR) + "/models";
}

// The model file of a fixture: by its recorded file name, else any .gguf under
// the models folder (one level deep) with the same general.name and vocab size.
std::optional<std::string> find_model(const nlohmann::json& fx) {
  const fs::path dir = models_dir();
  std::error_code ec;
  const fs::path direct = dir / fx["model_file"].get<std::string>();
  if (fs::exists(direct, ec)) return direct.string();
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() > 1 || !it->is_regular_file(ec) || it->path().extension() != ".gguf") continue;
    try {
      GgufFile g(it->path().string());
      if (g.get_string("general.name") == fx["general_name"].get<std::string>() &&
          g.get_string_array("tokenizer.ggml.tokens").size() == fx["n_vocab"].get<size_t>())
        return it->path().string();
    } catch (const Error&) {
    }
  }
  return std::nullopt;
}

// The header and metadata of a GGUF file, rewritten with zero tensors, so the
// tokenizer can be tested even where the loader rejects a tensor type.
std::string metadata_only_copy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string head(size_t{64} << 20, '\0');  // metadata of the default models is well below this
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  size_t pos = 24;
  auto need = [&](size_t n) {
    if (pos + n > head.size()) throw std::runtime_error("GGUF metadata larger than expected");
  };
  auto u64 = [&] {
    need(8);
    uint64_t v;
    std::memcpy(&v, head.data() + pos, 8);
    pos += 8;
    return v;
  };
  auto u32 = [&] {
    need(4);
    uint32_t v;
    std::memcpy(&v, head.data() + pos, 4);
    pos += 4;
    return v;
  };
  std::function<void(uint32_t)> skip_value = [&](uint32_t type) {
    static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
      const uint64_t n = u64();
      need(n);
      pos += n;
    } else if (type == 9) {
      const uint32_t et = u32();
      const uint64_t n = u64();
      for (uint64_t i = 0; i < n; ++i) skip_value(et);
    } else if (type < 13) {
      need(sizes[type]);
      pos += sizes[type];
    } else {
      throw std::runtime_error("bad GGUF value type");
    }
  };
  pos = 16;
  const uint64_t kv_count = u64();
  for (uint64_t i = 0; i < kv_count; ++i) {
    skip_value(8);
    skip_value(u32());
  }
  std::string out = head.substr(0, pos);
  std::memset(out.data() + 8, 0, 8);  // tensor_count = 0
  out.append((32 - out.size() % 32) % 32, '\0');
  return out;
}

void check_real_model(const std::string& name) {
  const auto fx = test::read_json(test::fixture_dir() + "/gguf_" + name + ".json");
  const auto path = find_model(fx);
  if (!path)
    GTEST_SKIP() << fx["model_file"].get<std::string>() << " (" << fx["general_name"].get<std::string>()
                 << ") not found in " << models_dir()
                 << "; fetch it with `" << fx.value("fetch", std::string("scripts/fetch_model.sh"))
                 << "` (or point LOOM_TEST_MODELS_DIR at a folder holding it)";
  std::unique_ptr<Tokenizer> tok;
  std::string metadata;
  try {
    GgufFile g(*path);
    tok = load_tokenizer_gguf(g);
  } catch (const Error& e) {
    std::printf("[ note     ] GgufFile rejected %s (%s); testing its metadata alone\n", path->c_str(), e.what());
    metadata = metadata_only_copy(*path);
    tok = load_tokenizer_gguf(*GgufFile::from_memory(metadata.data(), metadata.size(), *path));
  }
  EXPECT_EQ(static_cast<size_t>(tok->vocab_size()), fx["n_vocab"].get<size_t>());
  const auto r = test::compare_with_hf(*tok, fx["cases"], name);
  std::printf("[ fixture  ] gguf %s: %d strings, %d mismatches\n", name.c_str(), r.strings, r.mismatches);
  EXPECT_EQ(r.mismatches, 0);
}

TEST(GgufRealModel, Qwen2_5) { check_real_model("qwen2.5-0.5b"); }
TEST(GgufRealModel, Gemma3) { check_real_model("gemma3-270m"); }

// --- synthetic files ---

class GgufWriter {
 public:
  void str(const std::string& key, const std::string& v) {
    kv(key, 8);
    put_str(v);
  }
  void u32(const std::string& key, uint32_t v) {
    kv(key, 4);
    put(v);
  }
  void i32(const std::string& key, int32_t v) {
    kv(key, 5);
    put(v);
  }
  void boolean(const std::string& key, bool v) {
    kv(key, 7);
    put(static_cast<uint8_t>(v));
  }
  void str_array(const std::string& key, const std::vector<std::string>& v) {
    kv(key, 9);
    put(uint32_t{8});
    put(uint64_t{v.size()});
    for (const auto& s : v) put_str(s);
  }
  void i32_array(const std::string& key, const std::vector<int32_t>& v) {
    kv(key, 9);
    put(uint32_t{5});
    put(uint64_t{v.size()});
    for (int32_t x : v) put(x);
  }
  void f32_array(const std::string& key, const std::vector<float>& v) {
    kv(key, 9);
    put(uint32_t{6});
    put(uint64_t{v.size()});
    for (float x : v) put(x);
  }
  std::unique_ptr<GgufFile> open() {
    std::string file = "GGUF";
    auto app = [&file](const auto& v) { file.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    app(uint32_t{3});
    app(uint64_t{0});
    app(static_cast<uint64_t>(count_));
    file += body_;
    file.append((32 - file.size() % 32) % 32, '\0');
    data_ = file;
    return GgufFile::from_memory(data_.data(), data_.size());
  }

 private:
  template <typename T>
  void put(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void put_str(const std::string& s) {
    put(uint64_t{s.size()});
    body_ += s;
  }
  void kv(const std::string& key, uint32_t type) {
    put_str(key);
    put(type);
    ++count_;
  }
  std::string body_, data_;
  size_t count_ = 0;
};

// A byte-level vocabulary: the 256 byte characters, "he", "ll", "hell", "hello", specials.
void write_byte_level(GgufWriter& w, const std::string& pre = "gpt-2") {
  std::vector<std::string> tokens(tok::byte_level_chars().begin(), tok::byte_level_chars().end());
  for (const char* t : {"he", "ll", "hell", "hello", "<|im_start|>", "<|im_end|>"}) tokens.push_back(t);
  std::vector<int32_t> types(tokens.size(), 1);
  types[tokens.size() - 1] = types[tokens.size() - 2] = 3;
  w.str("general.architecture", "qwen2");
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", pre);
  w.str_array("tokenizer.ggml.tokens", tokens);
  w.i32_array("tokenizer.ggml.token_type", types);
  w.str_array("tokenizer.ggml.merges", {"h e", "l l", "he ll", "hell o"});
}

TEST(GgufSynthetic, ByteLevel) {
  GgufWriter w;
  write_byte_level(w);
  w.u32("tokenizer.ggml.eos_token_id", 261);
  w.u32("tokenizer.ggml.bos_token_id", 260);
  w.boolean("tokenizer.ggml.add_bos_token", false);
  auto tok = load_tokenizer_gguf(*w.open());
  EXPECT_EQ(tok->vocab_size(), 262);
  EXPECT_EQ(tok->encode("hello"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok->encode("<|im_start|>hello<|im_end|>"), (std::vector<int32_t>{260, 259, 261}));
  EXPECT_EQ(tok->encode("hello", true), (std::vector<int32_t>{259}));  // add_bos false
  EXPECT_TRUE(tok->is_special(261));
  EXPECT_EQ(tok->special().eos_ids, (std::vector<int32_t>{261}));
  EXPECT_EQ(tok->decode(tok->encode("héllo wörld 😀")), "héllo wörld 😀");
}

TEST(GgufSynthetic, SentencePieceByScore) {
  // <unk> <s> </s>, byte tokens, then pieces; "▁h" + "ello" -> "▁hello" by score.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(fmt::format("<0x{:02X}>", b));
  const std::vector<std::string> pieces = {"\xE2\x96\x81", "h", "e", "l", "o", "\xE2\x96\x81h", "el", "ll",
                                           "ello", "\xE2\x96\x81hello", "lo", "llo"};
  tokens.insert(tokens.end(), pieces.begin(), pieces.end());
  std::vector<float> scores(tokens.size(), 0.0f);
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  for (int b = 0; b < 256; ++b) types[3 + b] = 6;
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i);
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.str("tokenizer.ggml.model", "llama");
  w.str_array("tokenizer.ggml.tokens", tokens);
  w.f32_array("tokenizer.ggml.scores", scores);
  w.i32_array("tokenizer.ggml.token_type", types);
  w.u32("tokenizer.ggml.bos_token_id", 1);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  w.u32("tokenizer.ggml.unknown_token_id", 0);
  auto tok = load_tokenizer_gguf(*w.open());
  const auto ids = tok->encode("hello", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);  // add_bos defaults to true for SentencePiece
  EXPECT_EQ(tok->token_text(ids.back()), "\xE2\x96\x81hello");
  EXPECT_EQ(tok->decode(ids), "hello");
  // "ü" is not in the vocabulary: byte fallback, decoded back.
  const auto ids2 = tok->encode("hü");
  EXPECT_EQ(tok->decode(ids2), "hü");
  EXPECT_EQ(tok->token_text(ids2.back()), "<0xBC>");
}

TEST(GgufSynthetic, Errors) {
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "bert");
    w.str_array("tokenizer.ggml.tokens", {"a"});
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
  {
    GgufWriter w;  // no tokenizer at all
    w.str("general.architecture", "llama");
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
  {
    GgufWriter w;
    write_byte_level(w, "no-such-pre-tokenizer");
    try {
      load_tokenizer_gguf(*w.open());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no-such-pre-tokenizer"), std::string::npos) << e.what();
    }
  }
  {
    GgufWriter w;
    write_byte_level(w);
    w.u32("tokenizer.ggml.eos_token_id", 100000);
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.str_array("tokenizer.ggml.merges", {"a c"});
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.i32_array("tokenizer.ggml.token_type", {1});
    w.str_array("tokenizer.ggml.merges", {"a b"});
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "llama");
    w.str_array("tokenizer.ggml.tokens", {"a", "b"});
    w.f32_array("tokenizer.ggml.scores", {1.0f});
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
  {
    GgufWriter w;
    w.str("tokenizer.ggml.model", "gpt2");
    w.i32("tokenizer.ggml.tokens", 5);  // wrong type
    EXPECT_THROW(load_tokenizer_gguf(*w.open()), Error);
  }
}

}  // namespace
}  // namespace loom
