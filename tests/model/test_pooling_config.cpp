// PoolingConfig from sentence-transformers' modules.json + the Pooling
// module's config.json; the default (last token) without them; unsupported
// modes refused. (GGUF `{arch}.pooling_type`: test_config.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/pooling_config.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class SentenceTransformersDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loom_pooling_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "1_Pooling");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const fs::path& rel, const std::string& text) { std::ofstream(dir_ / rel) << text; }
  void modules(const std::string& pooling_path = "1_Pooling") {
    write(
        "modules.json",
        R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
      {"idx": 1, "name": "1", "path": ")" +
            pooling_path + R"(", "type": "sentence_transformers.models.Pooling"},
      {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])");
  }
  fs::path dir_;
};

TEST_F(SentenceTransformersDir, ModesAndDefault) {
  EXPECT_EQ(pooling_config_from_hf_dir(dir_).type, PoolingType::Last);  // no modules.json
  modules();
  write("1_Pooling/config.json",
        R"({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": true,
      "pooling_mode_cls_token": false, "pooling_mode_lasttoken": false})");
  const PoolingConfig mean = pooling_config_from_hf_dir(dir_);
  EXPECT_EQ(mean.type, PoolingType::Mean);
  EXPECT_EQ(mean.source, "1_Pooling/config.json");
  write("1_Pooling/config.json", R"({"pooling_mode_lasttoken": true})");
  EXPECT_EQ(pooling_config_from_hf_dir(dir_).type, PoolingType::Last);
  write("1_Pooling/config.json", R"({"pooling_mode_cls_token": true})");
  EXPECT_EQ(pooling_config_from_hf_dir(dir_).type, PoolingType::Cls);
}

TEST_F(SentenceTransformersDir, RefusesWhatItCannotPool) {
  modules();
  write("1_Pooling/config.json", R"({"pooling_mode_max_tokens": true})");
  EXPECT_THROW(pooling_config_from_hf_dir(dir_), Error);
  write("1_Pooling/config.json",
        R"({"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true})");
  EXPECT_THROW(pooling_config_from_hf_dir(dir_), Error);
  write("1_Pooling/config.json", "{}");
  EXPECT_THROW(pooling_config_from_hf_dir(dir_), Error);
  write("1_Pooling/config.json", "not json");
  EXPECT_THROW(pooling_config_from_hf_dir(dir_), Error);
  modules("../elsewhere");
  EXPECT_THROW(pooling_config_from_hf_dir(dir_), Error);
}

}  // namespace
}  // namespace loom
