// Hostile or broken HF tokenizer files: every one must raise loom::Error with
// a message, never crash or allocate from an unchecked size.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "fixture_util.h"
#include "tokenizer/tokenizer.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class MalformedHf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("loom_tok_malformed_{}_{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name, std::ios::binary) << text; }

  // A minimal valid byte-level tokenizer.json with `patch` applied to it.
  nlohmann::json base() {
    nlohmann::json vocab = nlohmann::json::object();
    int id = 0;
    for (const auto& c : tok::byte_level_chars()) vocab[c] = id++;
    vocab["ab"] = id++;
    return {{"version", "1.0"},
            {"added_tokens", nlohmann::json::array({{{"id", 257}, {"content", "<|eot|>"}, {"special", true}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array({"a b"})}}}};
  }

  std::string expect_error(const nlohmann::json& tj) { return expect_error_text(tj.dump()); }
  std::string expect_error_text(const std::string& text) {
    write("tokenizer.json", text);
    try {
      load_tokenizer_hf(dir_.string());
    } catch (const Error& e) {
      EXPECT_GT(std::strlen(e.what()), 10u);
      return e.what();
    }
    ADD_FAILURE() << "no error for " << text.substr(0, 200);
    return {};
  }

  fs::path dir_;
};

TEST_F(MalformedHf, BaseIsValid) {
  write("tokenizer.json", base().dump());
  auto tok = load_tokenizer_hf(dir_.string());
  EXPECT_EQ(tok->vocab_size(), 258);
  EXPECT_EQ(tok->encode("ab<|eot|>"), (std::vector<int32_t>{256, 257}));
}

TEST_F(MalformedHf, MissingDirectoryOrFile) {
  EXPECT_THROW(load_tokenizer_hf((dir_ / "nope").string()), Error);
  EXPECT_THROW(load_tokenizer_hf(dir_.string()), Error);  // no tokenizer.json
}

TEST_F(MalformedHf, NotJson) {
  expect_error_text("");
  expect_error_text("{");
  expect_error_text("{\"model\": [1, 2,");
  expect_error_text("[1, 2, 3]");
  expect_error_text("\"just a string\"");
  expect_error_text(std::string(100000, '[') + std::string(100000, ']'));  // nesting bomb
  expect_error_text("{\"model\": {}, \"model\": {}}");                   // duplicate key
}

TEST_F(MalformedHf, ModelProblems) {
  auto tj = base();
  tj.erase("model");
  EXPECT_NE(expect_error(tj).find("model"), std::string::npos);

  tj = base();
  tj["model"]["type"] = "Unigram";
  EXPECT_NE(expect_error(tj).find("Unigram"), std::string::npos);

  tj = base();
  tj["model"]["vocab"] = nlohmann::json::array();
  expect_error(tj);

  tj = base();
  tj["model"]["vocab"]["x"] = -1;
  expect_error(tj);

  tj = base();
  tj["model"]["vocab"]["x"] = 4000000000LL;  // would allocate a huge table
  expect_error(tj);

  tj = base();
  tj["model"]["vocab"]["x"] = "seven";
  expect_error(tj);

  tj = base();
  tj["model"]["vocab"]["x"] = 3;  // id used twice
  expect_error(tj);

  tj = base();
  tj["model"]["merges"] = nlohmann::json::array({"a zz"});
  EXPECT_NE(expect_error(tj).find("zz"), std::string::npos);

  tj = base();
  tj["model"]["merges"] = nlohmann::json::array({"abc"});
  expect_error(tj);

  tj = base();
  tj["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a"})});
  expect_error(tj);

  tj = base();
  tj["model"]["merges"] = nlohmann::json::array({"b b"});  // "bb" is not a token
  expect_error(tj);

  tj = base();
  tj["model"]["unk_token"] = "<nope>";
  expect_error(tj);

  tj = base();
  tj["model"]["continuing_subword_prefix"] = "##";
  expect_error(tj);
}

TEST_F(MalformedHf, PipelineProblems) {
  auto tj = base();
  tj["normalizer"] = {{"type", "NFKD"}};
  EXPECT_NE(expect_error(tj).find("NFKD"), std::string::npos);

  tj = base();
  tj["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(tj);

  tj = base();
  tj["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}};
  expect_error(tj);

  tj = base();
  tj["pre_tokenizer"] = {{"type", "Whatever"}};
  expect_error(tj);

  tj = base();
  tj["decoder"] = nullptr;  // byte-level without a ByteLevel decoder
  expect_error(tj);

  tj = base();
  tj["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 1000000}, {"stop", 0}};
  expect_error(tj);

  tj = base();
  tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", "not a list"}};
  expect_error(tj);
}

TEST_F(MalformedHf, AddedTokenProblems) {
  auto tj = base();
  tj["added_tokens"] = nlohmann::json::array({{{"id", 99999999}, {"content", "<x>"}}});
  expect_error(tj);

  tj = base();
  tj["added_tokens"] = nlohmann::json::array({{{"id", 5}, {"content", ""}}});
  expect_error(tj);

  tj = base();
  tj["added_tokens"] = nlohmann::json::array({{{"content", "<x>"}}});
  expect_error(tj);

  tj = base();
  tj["added_tokens"] = "nope";
  expect_error(tj);
}

TEST_F(MalformedHf, ConfigProblems) {
  write("tokenizer_config.json", R"({"bos_token": "<not-a-token>"})");
  expect_error(base());
  write("tokenizer_config.json", R"({"bos_token": 5})");
  expect_error(base());
  write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_error(base());
  write("tokenizer_config.json", "{");
  expect_error(base());
  fs::remove(dir_ / "tokenizer_config.json");
  write("generation_config.json", R"({"eos_token_id": [1, 99999]})");
  expect_error(base());
  write("generation_config.json", R"({"eos_token_id": "x"})");
  expect_error(base());
  write("generation_config.json", R"({"eos_token_id": [257, 5]})");
  write("tokenizer.json", base().dump());
  auto tok = load_tokenizer_hf(dir_.string());
  EXPECT_EQ(tok->special().eos_ids, (std::vector<int32_t>{257, 5}));
}

}  // namespace
}  // namespace loom
